"""A mutation fuzzer for every reader of the workbench.

Every file kind a store or an OpenPoke data dir holds is mutated (as JSON values, as
bytes, as log lines) and every reader is run on the result: the store's listing and
loading, the overview, the fork tree, materialize, verify, the token budgets, the trace,
search, the OpenPoke import, and a sample of ``soapwb`` commands with ``--json``. A reader
may load the file or raise the project's typed error naming it; anything else (another
exception, a case that runs past its time limit, ``--json`` output that is not UTF-8, a
file rewritten by a reader) is a failure, reported with what reproduces it.

The choices of a case come from a :class:`fuzz._choices.Chooser`: hypothesis draws them
(so a failure shrinks to a small mutation), or a seeded ``random.Random`` does (the
pytest suite's quick run, and a replay of a reported case).

``python -m fuzz --cases N`` runs it (``make fuzz``); the modules:

* :mod:`fuzz._choices`: where the choices come from;
* :mod:`fuzz._corpus`: the seed stores and data dirs, as bytes by relative path;
* :mod:`fuzz._mutators`: the mutations of each file kind;
* :mod:`fuzz._targets`: the readers each file kind is read by;
* :mod:`fuzz._case`: one case, its limits and its outcome;
* :mod:`fuzz._runner`: many cases, in worker processes, and the report.
"""

from fuzz._case import CaseFailure, Workbench, run_case
from fuzz._choices import Chooser, RandomChooser
from fuzz._corpus import Corpus, build_corpus

__all__ = ["CaseFailure", "Chooser", "Corpus", "RandomChooser", "Workbench", "build_corpus", "run_case"]
