"""importers: other agent frameworks' on-disk state, read and written into a sOAP store.

Each importer reads its source exactly the way the source itself does, reports what the
source would silently drop, and writes sOAP sessions with deterministic ids, so that
importing the same data twice changes nothing and importing it after it grew only
appends. The sources so far: :mod:`importers.openpoke` and :mod:`importers.otel`
(OpenTelemetry traces: OpenInference and the GenAI conventions), which also writes any
store back out as traces (:func:`importers.otel.export_otel`).
"""

from importers._errors import ImporterError

__all__ = ["ImporterError"]
