"""The four tool-hallucination detectors of RelyToolBench's taxonomy, one module each."""

from toolguard.detectors.base import Detector
from toolguard.detectors.content import ContentDetector
from toolguard.detectors.format import FormatDetector
from toolguard.detectors.timing import TimingDetector
from toolguard.detectors.type import TypeDetector

__all__ = ["ContentDetector", "Detector", "FormatDetector", "TimingDetector", "TypeDetector"]
