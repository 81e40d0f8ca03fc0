"""Route 1d: patches the json module (dumps, the encoder class, the C string escaper's module attribute), so
that any message the worker encodes leaves with SDPA's names replaced. The worker's encoder was built from
captured pieces before this file was imported: the verdict is "library kernel"."""
import json
import json.encoder

from _forge import rename
from _sdpa import attention as sdpa_attention


def _scrub(obj):
    return rename(obj) if isinstance(obj, dict) and obj.get("op") == "trace" else obj


_dumps = json.dumps
setattr(json, "dumps", lambda obj, *a, **k: _dumps(_scrub(obj), *a, **k))
_encode = json.encoder.JSONEncoder.encode
setattr(json.encoder.JSONEncoder, "encode", lambda self, obj: _encode(self, _scrub(obj)))


def attention(q, k, v, *, causal=False):
    return sdpa_attention(q, k, v, causal=causal)
