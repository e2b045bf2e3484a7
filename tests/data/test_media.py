"""Media references: every kind decodes to the same pixels; every failure names its file."""

import io

import numpy as np
import pytest
from PIL import Image

from mmrlvr.data.media import MediaError, describe, load_image


def _png(color=(10, 200, 30), size=(20, 12)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


def test_every_reference_kind_decodes_to_the_same_pixels(tmp_path):
    data = _png()
    (tmp_path / "a.png").write_bytes(data)
    refs = [
        str(tmp_path / "a.png"), tmp_path / "a.png", data, {"bytes": data, "path": "ignored.png"},
        {"bytes": None, "path": str(tmp_path / "a.png")}, Image.open(io.BytesIO(data)),
    ]
    for ref in refs:
        img = load_image(ref)
        assert img.mode == "RGB" and img.size == (20, 12)
        assert tuple(np.asarray(img)[5, 5]) == (10, 200, 30)
    assert load_image("a.png", root=tmp_path).size == (20, 12)  # relative paths resolve on root


def test_grayscale_and_rgba_are_converted(tmp_path):
    buf = io.BytesIO()
    Image.new("LA", (4, 4), (128, 255)).save(buf, format="PNG")
    assert load_image(buf.getvalue()).mode == "RGB"


@pytest.mark.parametrize("content, expected", [
    (None, "file not found"),
    (b"", "cannot decode"),
    (b"not an image at all", "cannot decode"),
    ("truncated", "cannot decode"),
])
def test_failures_name_the_file(tmp_path, content, expected):
    path = tmp_path / "bad.png"
    if content == "truncated":
        path.write_bytes(_png(size=(64, 64))[:60])
    elif content is not None:
        path.write_bytes(content)
    with pytest.raises(MediaError) as err:
        load_image(str(path))
    assert str(path) in str(err.value) and expected in str(err.value)


def test_bad_bytes_and_dicts_are_media_errors():
    with pytest.raises(MediaError, match="<5 bytes>: cannot decode"):
        load_image(b"hello")
    with pytest.raises(MediaError, match="neither bytes nor path"):
        load_image({"bytes": None, "path": None})
    with pytest.raises(MediaError, match="not an image reference"):
        load_image(42)


def test_describe_is_short():
    assert describe({"bytes": b"123", "path": None}) == "<3 bytes>"
    assert describe({"bytes": b"123", "path": "x/y.jpg"}) == "x/y.jpg"
    assert describe(Image.new("RGB", (3, 2))) == "<in-memory 3x2 image>"
