"""The fuzzer's quick run (``make fuzz`` runs 100,000 cases): mutated files of every kind
through every reader break none, and a reader that does break is reported with a saved
reproduction that ``python -m fuzz --replay`` reads again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fuzz import build_corpus
from fuzz.__main__ import main as fuzz_main
from fuzz._corpus import Corpus
from fuzz._runner import run


@pytest.fixture(scope="module")
def corpus(workbench_store: Path) -> Corpus:
    return build_corpus(workbench=workbench_store)


def test_two_thousand_mutated_cases_break_no_reader(corpus: Corpus, tmp_path: Path) -> None:
    report = run(corpus, 2000, workers=1, seed=20261201, engine="random", out=tmp_path, in_process=True)
    assert report.cases == 2000
    assert not report.failures, "\n".join(report.lines())
    assert set(report.by_seed) == {s.name for s in corpus.seeds}, "every seed was mutated"


def test_hypothesis_draws_the_cases_too(corpus: Corpus, tmp_path: Path) -> None:
    report = run(corpus, 200, workers=1, seed=5, engine="hypothesis", out=tmp_path, in_process=True)
    assert report.cases >= 200
    assert not report.failures, "\n".join(report.lines())


def test_a_reader_that_breaks_is_reported_shrunk_and_saved_for_replay(
    corpus: Corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import soap_core._tree
    from soap_core import Store
    from tests.conftest import SOAP_FIXTURE

    real = soap_core._tree._links
    [seed_session] = [
        Store(SOAP_FIXTURE, use_catalog=False).load_session(s.uuid) for s in Store(SOAP_FIXTURE).sessions()
    ]
    as_seeded = {cid: c.to_dict() for cid, c in seed_session.contexts.items()}

    def broken_links(session):  # type: ignore[no-untyped-def]
        # Common enough to be found in a few hundred cases: any context changed at all.
        if any(as_seeded.get(cid) != c.to_dict() for cid, c in session.contexts.items()):
            raise RuntimeError("planted bug: a context unlike the seed's breaks the tree")
        return real(session)

    monkeypatch.setattr(soap_core._tree, "_links", broken_links)
    only_hellopete = Corpus([corpus.named("hellopete")])
    report = run(only_hellopete, 600, workers=1, seed=1, engine="hypothesis", out=tmp_path, in_process=True)
    assert report.failures, "the planted bug was not found"
    failure = report.failures[0]
    assert "planted bug" in failure.text and "broken_links" in failure.where
    case = json.loads((Path(failure.saved) / "case.json").read_text())
    mutated = Path(failure.saved) / "files" / case["file"]
    assert mutated.is_file() and case["mutation"] in failure.text
    with pytest.raises(RuntimeError, match="planted bug"):
        fuzz_main(["--replay", failure.saved])
