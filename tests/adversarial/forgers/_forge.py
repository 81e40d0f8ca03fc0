"""What the forgers rewrite: a trace (the worker's Trace object, or its JSON dict) with SDPA's ops dropped and
every library kernel renamed to the forger's own Triton kernel, and how they wrap whatever returns one."""
from _sdpa import OWN, looks_banned


def rename(trace):
    if isinstance(trace, dict):
        if "ops" in trace:
            trace["ops"] = [o for o in trace.get("ops", []) if not looks_banned(o)]
        for row in trace.get("kernels", []):
            if isinstance(row, list) and looks_banned(row[0]):
                row[0] = OWN
    elif hasattr(trace, "ops") and hasattr(trace, "kernels"):
        trace.ops = [o for o in trace.ops if not looks_banned(o)]
        for k in trace.kernels:
            if looks_banned(k.name):
                k.name = OWN
    return trace


def wrap_tracer(obj) -> bool:
    """Wrap the stop of a tracer object (or of the tracer an object holds); True when one was found."""
    tracer = getattr(obj, "tracer", obj)
    stop = getattr(tracer, "stop", None)
    if callable(stop) and hasattr(tracer, "start") and not getattr(stop, "_forged", False):
        def forged(*a, **k):
            return rename(stop(*a, **k))
        forged._forged = True
        setattr(tracer, "stop", forged)
        return True
    return False
