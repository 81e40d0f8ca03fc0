"""Patches the timer through names the static scan cannot read: the integrity check must catch it."""
import torch

from honest_elementwise import attention  # noqa: F401

setattr(getattr(torch, "cu" + "da").Event, "elapsed" + "_time", lambda self, end: 0.001)
