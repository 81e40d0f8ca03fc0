"""Reference kernels, one file per step, numbered like their chapter (k01_… is chapter 1)."""
