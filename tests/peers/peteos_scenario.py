# mypy: disable-error-code="misc,untyped-decorator"
"""The agentic classes the peer driver runs real peteos with (imported only by the driver).

They live at module level so that peteos 0.6 records plain ``class.qualname`` values
(``Ledger``, ``Clerk``) in ``agentic_object.json``, and so that the driver's ``load`` can
restore the instances with the very classes that wrote them. Standard library and peteos
only; importing this module imports peteos, so the driver sets up ``$PETEOS_CONFIG`` and
tiktoken's rank file first.
"""

import base64
import dataclasses
import struct
import zlib
from pathlib import Path
from typing import Any, Optional

from peteos import AgenticObject, agentic_object, tool
from peteos.conversation import ContentPart, Message

# No ``from __future__ import annotations`` here: peteos reads tool parameter types
# with ``annotation.__name__``, and an application without that import hands it real types.


def png_1x1() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00\xff\x00\x00")
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")


def pdf() -> bytes:
    return (
        b"%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n"
        b"2 0 obj<</Type/Pages/Kids[3 0 R]/Count 1>>endobj\n"
        b"3 0 obj<</Type/Page/Parent 2 0 R/MediaBox[0 0 72 72]>>endobj\n"
        b"trailer<</Root 1 0 R>>\n%%EOF\n"
    )


def mp4() -> bytes:
    return struct.pack(">I", 24) + b"ftypisom" + struct.pack(">I", 512) + b"isomiso2" + b"\x00" * 8


def wav() -> bytes:
    samples = b"\x00\x00\x10\x00\x20\x00\x10\x00" * 4
    fmt = struct.pack("<HHIIHH", 1, 1, 8000, 16000, 2, 16)
    body = (
        b"WAVE"
        + b"fmt "
        + struct.pack("<I", len(fmt))
        + fmt
        + b"data"
        + struct.pack("<I", len(samples))
        + samples
    )
    return b"RIFF" + struct.pack("<I", len(body)) + body


def write_media(folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    files = {"png": ("pixel.png", png_1x1()), "pdf": ("invoice.pdf", pdf()), "mp4": ("clip.mp4", mp4())}
    paths = {}
    for key, (name, data) in files.items():
        (folder / name).write_bytes(data)
        paths[key] = folder / name
    return paths


@dataclasses.dataclass
class LedgerSummary:
    """What the ledger holds."""

    items: int
    total: float
    currency: str
    note: Optional[str] = None  # noqa: UP045  (typing.Optional on purpose: peteos reads its __name__)


class Ledger(AgenticObject):
    """You keep a ledger 📒 (帳簿) of named amounts for the user. Use your tools; answer briefly."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.entries: dict[str, float] = {}

    @tool
    def record(self, name: str, amount: float, count: int = 1, confirmed: bool = False) -> str:
        """Record ``count`` items called ``name`` at ``amount`` each."""
        self.entries[name] = self.entries.get(name, 0.0) + amount * count
        return f"{name}: {self.entries[name]:.2f} ({'confirmed' if confirmed else 'unconfirmed'})"

    @tool
    def tag(
        self,
        names: list,  # type: ignore[type-arg]
        meta: dict,  # type: ignore[type-arg]
        note: Optional[str] = None,  # noqa: UP045
        urgent: bool | None = None,
    ) -> dict:  # type: ignore[type-arg]
        """Tag entries with metadata."""
        return {"tagged": names, "meta": meta, "note": note, "urgent": urgent}

    @tool
    def total(self) -> float:
        """The sum of all entries."""
        return round(sum(self.entries.values()), 2)

    @tool
    async def attach_recording(self, label: str, runner: Any = None) -> str:
        """Attach the voice memo called ``label`` to the conversation."""
        data = base64.b64encode(wav()).decode("ascii")
        part = ContentPart.create_audio({"type": "base64", "media_type": "audio/wav", "data": data})
        text = ContentPart.create_text(f"Voice memo {label}")
        await runner.queue_message(Message.create(role="user", content_parts=[text, part]))
        return f"attached {label}"


# peteos' read_media tool is switched on by allow_media_access, which _collect_oap_config
# reads but @agentic_object does not accept: set the config the decorator would set.
Ledger._oap_config = {
    "imports": [],
    "import_aliases": {},
    "invoke_sub_agents": False,
    "allow_code_execution": False,
    "define_functions": False,
    "role": None,
    "allow_media_access": True,
}


@agentic_object(role="ClerkRole")
class Clerk(AgenticObject):
    """You are a clerk who stamps documents ✍️."""

    @tool
    def stamp(self, document: str, copies: int = 2) -> str:
        """Stamp ``document`` ``copies`` times."""
        return f"stamped {document} x{copies}"


CLASSES = {"Ledger": Ledger, "Clerk": Clerk}
