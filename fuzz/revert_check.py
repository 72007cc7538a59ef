"""``python -m fuzz.revert_check [NAME...]``: each protection against hostile files,
reverted on its own, must make its test fail.

For every check the named source file is changed (the fix taken out, by an exact text
replacement), the test that guards it is run, and the file is put back, whatever
happens. A check whose test still passes without its fix is reported: that test would
not notice the protection going. It changes files of the work tree while it runs: run it
on a clean tree, with nothing else importing the project.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHECKS: list[tuple[str, str, str, str, str]] = [
    (
        "ids",
        "soap_core/_ids.py",
        "    if isinstance(value, str):\n        problem = identifier_problem(value)",
        "    if False:\n        problem = identifier_problem(value)",
        "tests/test_hostile_input.py::test_an_active_context_id_that_cannot_name_a_file_marks_that_session_only",
    ),
    (
        "catalog-surrogates",
        "soap_core/_catalog.py",
        "    if isinstance(value, str) and not value.isascii():",
        "    if False:",
        "tests/test_hostile_input.py -k thread_id or indexed_and_searched",
    ),
    (
        "emit-json",
        "soapwb/common.py",
        "        text, escaped = _SURROGATE.subn(",
        "        escaped = 0\n        _unused = _SURROGATE.subn(",
        "tests/test_hostile_input.py -k lone_surrogate_in_a_message",
    ),
    (
        "cli-reconfigure",
        "soapwb/cli.py",
        '            reconfigure(errors="backslashreplace")',
        "            pass",
        "tests/test_hostile_input.py -k thread_id",
    ),
    (
        "records",
        "soap_core/_records.py",
        '        values = _checked(upgraded(data, path, "call"), path, "$", _CALL_TYPES, _CALL_REQUIRED, _CALL_IDS)',
        '        values = {k: v for k, v in upgraded(data, path, "call").items() if k in _CALL_TYPES}',
        "tests/test_hostile_input.py -k call_record",
    ),
    (
        "tree-cycles",
        "soap_core/_tree.py",
        "            if context_id in placed:\n                continue",
        "            if len(nodes) > 10000:\n                raise RecursionError('loop')",
        "tests/test_hostile_input.py -k 'listing_itself or each_the_others'",
    ),
    (
        "tree-roots",
        "soap_core/_tree.py",
        "    for context_id in session.contexts:  # contexts only a loop of links leads to\n        walk(context_id)",
        "",
        "tests/test_hostile_input.py -k each_the_others",
    ),
    (
        "compactions-seen",
        "analysis/_budget.py",
        "            and context.origin_context_id not in seen\n",
        "",
        "tests/test_hostile_input.py -k own_origin",
    ),
    (
        "trace-once",
        "soap_core/runtime/_trace.py",
        "        found = self._read.get(directory)",
        "        found = None",
        "tests/test_bounded_cost.py -k trace",
    ),
    (
        "timezone",
        "importers/openpoke/_reader.py",
        "    except (ZoneInfoNotFoundError, ValueError, OSError):",
        "    except (ZoneInfoNotFoundError, ValueError):",
        "tests/test_hostile_input.py -k timezone",
    ),
    (
        "parse-json",
        "importers/openpoke/_reader.py",
        '    except (ValueError, RecursionError) as exc:\n        return None, "nested',
        '    except json.JSONDecodeError as exc:\n        return None, "nested',
        "tests/test_hostile_input.py -k 'roster or summary_info or chat_history'",
    ),
    (
        "dates",
        "importers/openpoke/_reader.py",
        "        return local.replace(tzinfo=zone, fold=fold).astimezone(UTC)\n    except OverflowError:",
        "        return local.replace(tzinfo=zone, fold=fold).astimezone(UTC)\n    except ZeroDivisionError:",
        "tests/test_hostile_input.py -k date_whose",
    ),
    (
        "tool-listing",
        "replay/_runtime_source.py",
        "    tools = tool_listing(context.content_map[key])",
        "    tools = [ToolPart(t['name'], t.get('description', ''), t.get('parameters', {})) for t in json.loads(context.content_map[key])]",
        "tests/test_hostile_input.py -k tool_listing",
    ),
    (
        "session-file",
        "soap_core/_session.py",
        '            raise ContextNotFoundError(self.session_file, "session has no active context")',
        '            raise ContextNotFoundError(self.uuid, "session has no active context")',
        "tests/test_hostile_input.py -k names_its_session_json",
    ),
    (
        "hash-surrogatepass",
        "soap_core/_chat.py",
        'canonical_json(request).encode("utf-8", "surrogatepass")',
        'canonical_json(request).encode("utf-8")',
        "tests/test_hostile_input.py -k 'lone_surrogate_in_a_message and materialize'",
    ),
    (
        "long-runs",
        "soap_core/_tokens.py",
        "        if 0 < len(runs) <= _MOST_RUNS:",
        "        if False:",
        "tests/test_bounded_cost.py -k image_of_zeros",
    ),
    (
        "json-lenient",
        "soap_core/_jsonio.py",
        "    cleaned = _without_comments(text)\n",
        "    return json5.loads(text)\n    cleaned = _without_comments(text)\n",
        "tests/test_bounded_cost.py -k 'cut-by-one-byte or trailing-comma'",
    ),
    (
        "invocation-cycles",
        "soap_core/runtime/_trace.py",
        "            if parent_id in walked:\n                loops[current.id] = (",
        "            if False:\n                loops[current.id] = (",
        "tests/test_hostile_input.py -k parents_loop",
    ),
]
CHECKS.append(
    (
        "catalog-role-digest",
        "soap_core/_catalog.py",
        'item.role.encode("utf-8", "surrogatepass")',
        "item.role.encode()",
        "tests/test_hostile_input.py -k instance_naming",
    )
)
CHECKS.append(
    (
        "record-nulls",
        "soap_core/_records.py",
        "        return cls(**_without_nulls(cls, values))\n\n\n_INVOCATION_REQUIRED",
        "        return cls(**values)\n\n\n_INVOCATION_REQUIRED",
        "tests/test_hostile_input.py -k null_where",
    )
)
CHECKS.append(
    (
        "record-caller",
        "soap_core/_records.py",
        '        values.setdefault("caller", None)  # plain Python called it\n',
        "",
        "tests/test_hostile_input.py -k invocation_record",
    )
)


CHECKS.append(
    (
        "json5-depth",
        "soap_core/_jsonio.py",
        "    if depth > JSON5_DEPTH:",
        "    if False:",
        "tests/test_hostile_input.py -k nested_past",
    )
)


def run_check(name: str, rel: str, old: str, new: str, test: str) -> tuple[bool, str]:
    """(whether the test failed without the fix, pytest's last line)."""
    path = ROOT / rel
    source = path.read_text()
    if source.count(old) != 1:
        return False, f"the fix is not in {rel} as this check expects: update the check"
    path.write_text(source.replace(old, new))
    try:
        target, _, selection = test.partition(" -k ")
        command = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", target]
        if selection:
            command += ["-k", selection.strip("'")]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        try:
            done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env, timeout=120)
        except subprocess.TimeoutExpired:
            return True, "timed out (the loop the fix ends)"
        last = (done.stdout.strip().splitlines() or ["?"])[-1]
        return done.returncode != 0, last
    finally:
        path.write_text(source)


def main(names: list[str]) -> int:
    unguarded = 0
    for name, rel, old, new, test in CHECKS:
        if names and name not in names:
            continue
        failed, last = run_check(name, rel, old, new, test)
        unguarded += not failed
        print(f"{name:22} {'guarded' if failed else 'NOT GUARDED'}: {last}", flush=True)
    return 1 if unguarded else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
