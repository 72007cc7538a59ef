"""A session whose uuid is not unique is still reachable: as ``ROLE/UUID``.

The same uuid can sit under two role folders (a copied folder, or role names that are
the same word in two Unicode normalizations, ``Café`` composed and decomposed), or twice
in one role (a folder copied under another name). A bare uuid is then ambiguous; the
error names each session in a form that reaches it alone, ``ROLE/UUID`` (or
``ROLE/FOLDER``), and ``show``, ``tree`` and ``trace`` take that form, with a prefix of
the uuid too. Twin role names print apart, in a form that can be typed back. The role
part is only ever compared with the store's roles, never joined to a path: anything
that is not one of them is refused like a path.
"""

from __future__ import annotations

import json
import shutil
import unicodedata
from pathlib import Path

import pytest

from soap_core import Store, message_rows, search_store
from soap_core._paths import UnsafeNameError
from tests.cli_process import soapwb
from tests.conftest import CHILD_ID, SESSION_UUID, load_fixture_context, snapshot

NFC = unicodedata.normalize("NFC", "Café")
NFD = unicodedata.normalize("NFD", "Café")
ORIGINAL_LAST = message_rows(load_fixture_context(CHILD_ID))[-1].preview


def copy_role(store: Path, role: str, marker: str, folder: str = SESSION_UUID) -> Path:
    """The sample session copied to ``agents/<role>/<folder>`` (same uuid inside), its
    last message saying ``marker`` so a test can tell which copy it reached."""
    target = store / "agents" / role / folder
    shutil.copytree(store / "agents" / "HelloPete" / SESSION_UUID, target)
    [child] = target.glob(f"*{CHILD_ID}.json")
    context = json.loads(child.read_text())
    context["messages"][-1]["content"] = [{"type": "text", "text": marker}]
    child.write_text(json.dumps(context, indent=2))
    return target


def shown_role(argv_output: str) -> str:
    """The ``ROLE`` of a ``show``/``tree`` header line ``ROLE/UUID ...``."""
    return argv_output.splitlines()[0].split("/", 1)[0]


@pytest.mark.parametrize("catalog", ["with the catalog", "without"])
def test_a_uuid_under_two_role_folders_is_reached_as_role_slash_uuid_or_role_slash_prefix(
    store_copy: Path, catalog: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {} if catalog == "with the catalog" else {"SOAPWB_NO_CATALOG": "1"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    copy_role(store_copy, "Copy", "reached the copy")
    store = Store(store_copy)
    for role in ("HelloPete", "Copy"):
        for ref in (f"{role}/{SESSION_UUID}", f"{role}/{SESSION_UUID[:13]}", f"{role}/3f0c2b6e"):
            summary = store.find(ref)
            assert (summary.role, summary.path) == (role, store_copy / "agents" / role / SESSION_UUID), ref
    for command in ("show", "tree", "trace"):
        for role in ("HelloPete", "Copy"):
            proc = soapwb(command, f"{role}/{SESSION_UUID[:13]}", "--store", store_copy, env=env)
            assert proc.returncode == 0, proc
            if command != "trace":  # the sample session has no invocation records
                assert shown_role(proc.stdout) == role, proc.stdout
    copy = soapwb("show", "Copy/3f0c", "--store", store_copy, env=env).stdout
    original = soapwb("show", "HelloPete/3f0c", "--store", store_copy, env=env).stdout
    assert "reached the copy" in copy and "reached the copy" not in original


@pytest.mark.parametrize(
    "ref",
    [f"../{SESSION_UUID}", f"Nope/{SESSION_UUID}", f"HelloPete/../{SESSION_UUID}", "/etc/passwd", "HelloPete/a/b",
     f"./{SESSION_UUID}", f"/{SESSION_UUID}", "HelloPete/", f"agents/HelloPete/{SESSION_UUID}"],
)  # fmt: skip
def test_a_role_part_that_is_not_a_role_of_the_store_is_refused_like_a_path(
    store_copy: Path, ref: str
) -> None:
    copy_role(store_copy, "Copy", "copy")
    before = snapshot(store_copy.parent)
    with pytest.raises(UnsafeNameError):
        Store(store_copy).find(ref)
    proc = soapwb("show", ref, "--store", store_copy)
    assert proc.returncode == 1 and "refused" in proc.stderr, proc
    assert Store(store_copy).find(f"Copy/{SESSION_UUID}").role == "Copy"  # the form itself works
    assert snapshot(store_copy.parent) == before


def test_the_ambiguity_error_names_each_session_in_a_form_that_reaches_it_alone(store_copy: Path) -> None:
    copy_role(store_copy, "Copy", "the copy")
    copy_role(store_copy, "HelloPete", "the renamed copy", folder=f"{SESSION_UUID}-copy")
    proc = soapwb("show", "3f0c", "--store", store_copy)
    assert proc.returncode == 1 and "'3f0c' matches 3 sessions" in proc.stderr, proc
    listed = proc.stderr.split("sessions: ", 1)[1].split(";", 1)[0].split(", ")
    assert "ROLE/UUID" in proc.stderr and len(listed) == 3, proc.stderr
    reached = set()
    for form in listed:
        shown = soapwb("show", form, "--json", "--store", store_copy)
        assert shown.returncode == 0, (form, shown)
        data = json.loads(shown.stdout)
        reached.add((data["role"], data["messages"][-1]["preview"]))
    assert reached == {
        ("Copy", "the copy"),
        ("HelloPete", "the renamed copy"),
        ("HelloPete", ORIGINAL_LAST),
    }


def test_a_folder_copied_under_another_name_in_the_same_role_is_reached_by_role_and_folder(
    store_copy: Path,
) -> None:
    copy_role(store_copy, "HelloPete", "the renamed copy", folder=f"{SESSION_UUID}-copy")
    store = Store(store_copy)
    assert store.find(f"HelloPete/{SESSION_UUID}").path.name == SESSION_UUID
    assert store.find(f"HelloPete/{SESSION_UUID}-copy").path.name == f"{SESSION_UUID}-copy"
    proc = soapwb("tree", f"HelloPete/{SESSION_UUID}", "--store", store_copy)
    assert proc.returncode == 0, proc


def test_twin_role_names_in_two_unicode_normalizations_print_apart_and_what_is_printed_reaches_each(
    store_copy: Path,
) -> None:
    assert NFC != NFD and unicodedata.normalize("NFC", NFD) == NFC
    copy_role(store_copy, NFC, "composed")
    copy_role(store_copy, NFD, "decomposed")
    listing = soapwb("ls", "--store", store_copy)
    assert listing.returncode == 0, listing
    cells = [line.split("  ", 1)[0] for line in listing.stdout.splitlines()[1:] if SESSION_UUID in line]
    roles = [c for c in cells if c != "HelloPete"]
    assert len({unicodedata.normalize("NFC", r) for r in roles}) == 2, listing.stdout  # they print apart
    assert {r["role"] for r in json.loads(soapwb("ls", "--json", "--store", store_copy).stdout)} >= {NFC, NFD}
    reached = {}
    for role in roles:  # typed back as printed
        shown = soapwb("show", f"{role}/{SESSION_UUID[:13]}", "--json", "--store", store_copy)
        assert shown.returncode == 0, (role, shown)
        data = json.loads(shown.stdout)
        reached[data["role"]] = data["messages"][-1]["preview"]
        text = soapwb("show", f"{role}/{SESSION_UUID[:13]}", "--store", store_copy).stdout
        assert shown_role(text) == role, text  # the header prints it as ls does
    assert reached == {NFC: "composed", NFD: "decomposed"}


def test_a_role_typed_in_the_other_normalization_reaches_it_when_it_has_no_twin(store_copy: Path) -> None:
    copy_role(store_copy, NFD, "decomposed")
    assert Store(store_copy).find(f"{NFC}/{SESSION_UUID}").role == NFD  # a terminal types NFC
    proc = soapwb("show", f"{NFC}/3f0c", "--store", store_copy)
    assert proc.returncode == 0 and "decomposed" in proc.stdout, proc


def test_the_pages_session_picker_labels_twin_roles_apart(store_copy: Path) -> None:
    from tests.apptest import open_app_page

    for role, uuid in ((NFC, "20250612-c0ffee00-1111-4222-8333-444444444444"), (NFD, "20250612-c0ffee11-1111-4222-8333-444444444444")):  # fmt: skip
        folder = copy_role(store_copy, role, role, folder=uuid)
        session = json.loads((folder / "session.json").read_text())
        (folder / "session.json").write_text(json.dumps({**session, "uuid": uuid}, indent=2))
    at = open_app_page(store_copy, "fork_tree")
    options = next(box for box in at.selectbox if box.label == "Session").options
    roles = [o.split(" · ")[0] for o in options if not o.startswith("HelloPete ")]
    assert len(roles) == 2 and len({unicodedata.normalize("NFC", r) for r in roles}) == 2, options


def test_verify_tokens_and_search_reach_each_copy_of_a_uuid_under_two_roles(
    store_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Commands that walk the store look each session up by ``ROLE/FOLDER``, not by its
    bare uuid, which a copied folder makes ambiguous."""
    copy_role(store_copy, "Copy", "reached the copy")
    verify = soapwb("verify", "--store", store_copy, "--json")
    assert verify.returncode == 0 and json.loads(verify.stdout)["mismatches"] == 0, verify
    for role in ("HelloPete", "Copy"):
        tokens = soapwb("tokens", f"{role}/{SESSION_UUID}", "--store", store_copy, "--json")
        assert tokens.returncode == 0, tokens
    store = Store(store_copy)
    for summary in store.sessions():
        assert store.load_session(summary.ref).directory == summary.path
    monkeypatch.setenv("SOAPWB_NO_CATALOG", "1")  # search by reading every session
    hits = search_store(Store(store_copy), "reached the copy")
    assert [h.role for h in hits] == ["Copy"], hits
