"""Example agentic apps and the demo store built from them.

Two apps from the seeds, written against :mod:`soap_core.runtime`:

* :mod:`demo.log_analyzer`: the Log Analyzer, an object with tools over one log file and
  a rolling-token-window compaction hook, which has a chunk summarizer summarise parts of
  the log, which in turn asks a keyword extractor: a chain three objects deep.
* :mod:`demo.poke`: an interaction agent shaped like OpenPoke's, which talks to the user
  and delegates tasks to named execution agents working on an in-memory mailbox.

:func:`demo.build.build_demo_store` runs both through a scripted scenario against a real
model and writes a store that shows every feature the workbench reads: reused threads,
forks from compaction, cross-object chains and a refused (no-circle) invocation.
"""

from demo.build import DemoSummary, build_demo_store, summarize_sessions, write_sample_log
from demo.log_analyzer import ChunkSummarizer, ChunkSummary, KeywordExtractor, LogAnalyzer
from demo.poke import Draft, Email, ExecutionAgent, InteractionAgent, Mailbox

__all__ = [
    "ChunkSummarizer",
    "ChunkSummary",
    "DemoSummary",
    "Draft",
    "Email",
    "ExecutionAgent",
    "InteractionAgent",
    "KeywordExtractor",
    "LogAnalyzer",
    "Mailbox",
    "build_demo_store",
    "summarize_sessions",
    "write_sample_log",
]
