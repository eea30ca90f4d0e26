"""Document-JEPA: a promptable document model (document image + OCR words + question → answer mask).

The modules are added by later milestones; this package only reserves the name for now.
"""

__version__ = "0.1.0"
