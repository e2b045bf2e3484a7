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


def test_16_bit_images_are_scaled_not_blown_to_white():
    # a 16-bit gradient 0..65520; pixel (row 32, col 0) holds 32*64*16 = 32768 -> 32768 / 257 = 127.5 -> 128
    a = (np.arange(64 * 64).reshape(64, 64) * 16).astype(np.uint16)
    buf = io.BytesIO()
    Image.fromarray(a).save(buf, format="PNG")
    img = load_image(buf.getvalue())
    assert Image.open(io.BytesIO(buf.getvalue())).mode == "I;16"
    px = np.asarray(img)
    assert img.mode == "RGB" and tuple(px[32, 0]) == (128, 128, 128) and px[0, 0, 0] == 0
    assert px[63, 63, 0] == 255  # 65520 / 257 = 254.9 -> 255
    assert 120 < px.mean() < 135  # a gradient, not Pillow's clipped white (mean 254.5)


def test_images_over_the_pixel_limit_are_refused_before_decoding(tmp_path):
    # 10000 x 10000 = 100 MP: over the 89 MP limit, under Pillow's own error at 179 MP (it only warns)
    path = tmp_path / "big.png"
    Image.new("1", (10_000, 10_000)).save(path)
    with pytest.raises(MediaError, match=r"big.png: too large to decode \(10000x10000 = 100 MP, more than 89 MP\)"):
        load_image(str(path))


def test_an_image_the_processor_would_refuse_is_bad_media(tmp_path):
    # 28 x 8000: aspect 8000 / 28 = 285.7 > 200, which Qwen-VL's smart_resize raises on
    path = tmp_path / "strip.png"
    Image.new("RGB", (28, 8000), (5, 5, 5)).save(path)
    with pytest.raises(MediaError, match=r"strip.png: aspect ratio 286:1 \(28x8000\) is over the image processor's limit"):
        load_image(str(path))
    assert load_image(Image.new("RGB", (40, 8000))).size == (40, 8000)  # 200:1 exactly is accepted


def test_a_directory_is_not_reported_as_missing(tmp_path):
    with pytest.raises(MediaError, match="is a directory"):
        load_image(str(tmp_path))
