"""Route 1d: patches the json module (dumps, the encoder class, the C string escaper's module attribute), so
that any message the worker encodes leaves with SDPA's names replaced. The worker's encoder was built from
captured pieces before this file was imported: the verdict is "library kernel"."""
import json
import json.encoder

from _sdpa import OWN, attention as sdpa_attention, looks_banned


def _scrub(obj):
    if isinstance(obj, dict):
        if obj.get("op") == "trace":
            obj = dict(obj)
            obj["ops"] = [o for o in obj.get("ops", []) if not looks_banned(o)]
            obj["kernels"] = [[OWN, *row[1:]] if looks_banned(row[0]) else row for row in obj.get("kernels", [])]
        return obj
    return obj


_dumps = json.dumps
setattr(json, "dumps", lambda obj, *a, **k: _dumps(_scrub(obj), *a, **k))
_encode = json.encoder.JSONEncoder.encode
setattr(json.encoder.JSONEncoder, "encode", lambda self, obj: _encode(self, _scrub(obj)))


def attention(q, k, v, *, causal=False):
    return sdpa_attention(q, k, v, causal=causal)
