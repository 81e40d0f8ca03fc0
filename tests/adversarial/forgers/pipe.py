"""Route 1e: knows nothing of the tracer — wraps multiprocessing.connection's send_bytes (and _send_bytes)
so that every JSON message leaving the worker is rewritten: SDPA's ops dropped, library kernels renamed to
the submission's own. The worker writes to the judge's socket with os.write captured before this file was
imported: the verdict is "library kernel"."""
import json
from multiprocessing import connection

from _forge import rename
from _sdpa import attention as sdpa_attention


def _rewrite(buf):
    try:
        obj = json.loads(bytes(buf))
    except Exception:
        return buf
    if isinstance(obj, dict) and obj.get("op") == "trace":
        return json.dumps(rename(obj)).encode()
    return buf


for name in ("send_bytes", "_send_bytes"):
    orig = getattr(connection.Connection, name)
    setattr(connection.Connection, name, lambda self, buf, *a, orig=orig, **k: orig(self, _rewrite(buf), *a, **k))


def attention(q, k, v, *, causal=False):
    return sdpa_attention(q, k, v, causal=causal)
