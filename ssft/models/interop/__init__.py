"""Models in and out: what a pretrained checkpoint folder is and what ssft takes from it (``checkpoint``), and
the folders ssft writes for other libraries (``export``: transformers / sentence-transformers / PyLate formats)."""
