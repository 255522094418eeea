"""Self-contained interactive HTML reports (``--html FILE``): one file per page, plotly.js inlined, no network.

Pages: :mod:`~trainsim.report.whatif` (the SMon view of a straggler analysis), :mod:`~trainsim.report.predict`
(both engines), :mod:`~trainsim.report.search`, :mod:`~trainsim.report.plan` and :mod:`~trainsim.report.cluster`;
:mod:`~trainsim.report.page` is the shared page builder. See ``docs/reports.md``.
"""

from __future__ import annotations
