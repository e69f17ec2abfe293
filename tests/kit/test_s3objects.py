"""Object access for checkpoints and samples (kit/s3objects.py) against the real S3 gateway (versitygw,
built by `make s3`): multipart PUT in fixed parts (aborted on failure), ranged and whole GETs."""
from __future__ import annotations

from pathlib import Path

import pytest

from storagebrief.core import config, s3gateway, s3store, targets
from storagebrief.kit import s3objects, s3ops

try:
    s3gateway.binary()
    NO_GATEWAY = None
except s3gateway.GatewaySetupError as exc:
    NO_GATEWAY = str(exc)
needs_gateway = pytest.mark.skipif(NO_GATEWAY is not None, reason=f"{NO_GATEWAY}")


def _target(tmp: Path) -> targets.Target:
    data = {"targets": [{"name": "obj", "path": str(tmp / "obj"), "kind": "s3", "s3": {}}]}
    return targets.resolve_all(config.validate(data, root=tmp), create=True)[0]


@needs_gateway
def test_multipart_put_in_parts_ranged_and_whole_get(tmp_path):
    st = s3store.ObjectStore(_target(tmp_path), tmp_path / "logs").open()
    try:
        part = 5 << 20
        data = s3ops.payload(2 * part + 1234, seed=3)
        res = s3objects.multipart_put(st, "ckpt/rank-0", [data[i:i + part] for i in range(0, len(data), part)], part)
        assert res["parts"] == 3 and res["bytes"] == len(data)
        assert (st.gateway.root / st.bucket / "ckpt" / "rank-0").read_bytes() == data     # one plain file
        assert s3objects.ranged_get(st, "ckpt/rank-0", part - 10, 20) == data[part - 10:part + 10]
        assert s3objects.read_whole(st, "ckpt/rank-0", 1 << 20) == len(data)
        with pytest.raises(ValueError, match="5 MiB minimum"):
            s3objects.multipart_put(st, "x", [b"1"], 1 << 20)

        def failing():
            yield data[:part]
            raise RuntimeError("rank died")
        with pytest.raises(RuntimeError):
            s3objects.multipart_put(st, "ckpt/rank-1", failing(), part)
        assert not st.client.list_multipart_uploads(Bucket=st.bucket).get("Uploads")     # aborted, no parts left
        assert "ckpt/rank-1" not in st.list_keys("ckpt/")
    finally:
        st.close()
