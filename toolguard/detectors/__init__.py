"""Tool-hallucination detectors, one module each, registered by kind.

RelyToolBench's four types: :class:`TypeDetector` (fabricated or irrelevant tool),
:class:`FormatDetector` (JSON, keys, types), :class:`TimingDetector` (identical repeat),
:class:`ContentDetector` (values not grounded in the conversation); and
:class:`ProvenanceDetector` (tool output steering a state-changing call).  A new
detector is a module with a :class:`Detector` subclass decorated with
:func:`register_detector`, imported here (see :mod:`toolguard.detectors.base`).
"""

from toolguard.detectors.base import DETECTORS, Detector, DetectorOptions, register_detector
from toolguard.detectors.content import ContentDetector
from toolguard.detectors.format import FormatDetector
from toolguard.detectors.intent import IntentDetector
from toolguard.detectors.provenance import ProvenanceDetector
from toolguard.detectors.timing import TimingDetector
from toolguard.detectors.type import TypeDetector

__all__ = [
    "DETECTORS",
    "ContentDetector",
    "Detector",
    "DetectorOptions",
    "FormatDetector",
    "IntentDetector",
    "ProvenanceDetector",
    "TimingDetector",
    "TypeDetector",
    "register_detector",
]
