"""Transparent device emulation: run unmodified PyTorch scripts on a virtual GPU and predict their step time."""
