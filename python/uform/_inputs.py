"""The model verbs' Python inputs as what C reads, checked first: model paths, texts (a ``str`` or
bytes-like each) and images (bytes, paths, NumPy arrays, PIL images), the embeddings' dtype. A
Python type mistake raises `TypeError`, a value C cannot take `Error(INVALID_ARGUMENT)` naming it.
Used by `uform.models`."""

from __future__ import annotations

import ctypes
import io
import os
import stat
from collections.abc import Mapping

from ._codes import DType, Status, _enum
from ._errors import Error

try:  # NumPy is optional: without it embeddings are lists of lists.
    import numpy as _np
except ImportError:  # pragma: no cover - exercised where NumPy is absent
    _np = None

#: The embeddings' element types and their sizes in bytes; also the weights' dtypes.
_EMBEDDING_BYTES = {DType.F32: 4, DType.BF16: 2, DType.F16: 2}

_BYTES_LIKE = (bytes, bytearray, memoryview)

#: The largest image file read from a path: the CLI's cap (tools/encode.c, ENCODE_IMAGE_MAX_BYTES).
_IMAGE_FILE_MAX_BYTES = 1 << 30

#: The most pixels of a NumPy image copied for C to read: the decoders' cap on a decoded image
#: (src/image/image.h, UFORM_IMAGE_DEFAULT_MAX_PIXELS, twice PIL's MAX_IMAGE_PIXELS).
_COPIED_IMAGE_MAX_PIXELS = 178956970

#: What a path that is not a regular file names, for the refusal.
_FILE_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
               (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _member(cls, value, name: str, valid):
    """``value`` as a member of the enumeration ``cls`` (`_enum`'s rules: a plain integer out of
    range is left for the engine to refuse), its `TypeError` naming the ``valid`` members."""
    try:
        return _enum(cls, value, name)
    except TypeError:
        names = ", ".join(f"{cls.__name__}.{member.name}" for member in valid)
        raise TypeError(f"{name} must be one of {names}, not {value!r}") from None


def _embedding_dtype(dtype) -> tuple:
    """The output's `DType` (None: F32) and its element size; INVALID_ARGUMENT for another dtype,
    before a buffer is sized for it."""
    dtype = _member(DType, DType.F32 if dtype is None else dtype, "dtype", _EMBEDDING_BYTES)
    if dtype not in _EMBEDDING_BYTES:
        raise Error(Status.INVALID_ARGUMENT, f"dtype is {dtype!s}; expected DType.F32, DType.BF16 or DType.F16")
    return dtype, _EMBEDDING_BYTES[dtype]


def _model_path(path) -> bytes:
    """A model directory as the bytes `uform_model_open` reads: a ``str``, ``bytes`` or
    ``os.PathLike``, neither empty nor holding a NUL byte (C would stop reading there)."""
    try:
        path = os.fspath(path)
    except TypeError:
        raise TypeError(f"path must be a str, bytes or os.PathLike, not {path!r}") from None
    encoded = os.fsencode(path)
    if not encoded:
        raise Error(Status.INVALID_ARGUMENT, "path is empty; name a model directory")
    if b"\0" in encoded:
        raise Error(Status.INVALID_ARGUMENT, f"path {path!r} has an embedded null byte")
    return encoded


def _refuse_unordered(items, name: str) -> None:
    """A mapping would give its keys and a set an arbitrary order, both silently: `TypeError`."""
    if isinstance(items, Mapping):
        hint = " (a processor's output? pass its 'texts' or 'images')" if {"texts", "images"} & set(items) else ""
        raise TypeError(f"{name} must be a sequence, not a {type(items).__name__}, whose iteration gives its keys{hint}")
    if isinstance(items, (set, frozenset)):
        raise TypeError(f"{name} must be a sequence, not a {type(items).__name__}, whose order is arbitrary; pass a list")


def _text_list(texts) -> list:
    """One text (a ``str`` or bytes-like) as a list of one, or a sequence of texts as a list."""
    if isinstance(texts, (str, *_BYTES_LIKE)):
        return [texts]
    _refuse_unordered(texts, "texts")
    try:
        return list(texts)
    except TypeError:
        raise TypeError(f"texts must be a str, bytes-like or a sequence of them, not {type(texts).__name__}") from None


def _text_bytes(text, name: str) -> bytes:
    """One text as the bytes the engine reads: a ``str`` in UTF-8 (a lone surrogate as its three
    bytes, which the engine refuses as invalid UTF-8, as it would from ``bytes``), a bytes-like
    object as it is; anything else is a `TypeError` naming ``name``."""
    # str.encode and the buffer itself, never a subclass's encode(), __bytes__ or __len__: the
    # length C is given must be the real buffer's.
    if isinstance(text, str):
        return str.encode(text, "utf-8", "surrogatepass")
    if isinstance(text, _BYTES_LIKE):
        return memoryview(text).tobytes()
    raise TypeError(f"{name} must be a str or bytes-like (bytes, bytearray, memoryview), not {type(text).__name__}")


def _is_pil(image) -> bool:
    return any(c.__module__.startswith("PIL.") and c.__name__ == "Image" for c in type(image).__mro__)


#: PIL modes passed to C as uncompressed PNG, which C decodes and resizes in that mode as PIL does.
_PNG_MODES = ("1", "L", "LA", "P", "RGBA", "I;16")


def _resized_here(image) -> bool:
    """Whether ``image`` is a PIL image in a mode neither RGB nor PNG's (CMYK, YCbCr, LAB, HSV, I, F,
    PA, ...), which `_pil_image` resizes itself, needing the model's image size."""
    return _is_pil(image) and image.mode != "RGB" and image.mode not in _PNG_MODES


def _package_resize(image, size: int):
    """What the ``uform`` package's PyTorch processor makes of a PIL image before its centre crop:
    torchvision's ``Resize(size, BICUBIC)`` in the image's own mode (the short side to ``size``, the
    long side to ``int(size * long / short)``; nothing where the short side is ``size`` already), then
    ``convert("RGB")``."""
    from PIL import Image

    width, height = image.size
    short, long = (width, height) if width <= height else (height, width)
    if short != size:
        scaled = int(size * long / short)
        image = image.resize((size, scaled) if width <= height else (scaled, size), Image.BICUBIC)
    return image.convert("RGB")


def _pil_image(image, index: int, size: int):
    """A PIL image as what C takes, its pixels read now (closing or drawing on it later changes
    nothing): RGB as a NumPy copy of its pixels; modes PNG holds (`_PNG_MODES`) as uncompressed PNG
    bytes; other modes resized in their own mode and made RGB as the ``uform`` package's processor
    does (`_package_resize`, ``size`` the model's image side; where it is 0, made RGB only), so C
    resizes them by identity and crops. RGB is PNG bytes too without NumPy."""
    if not image.width or not image.height:  # before PNG, which refuses an empty image in its own words
        side = "width" if not image.width else "height"
        shape = (image.height, image.width, len(image.getbands()))
        raise Error(Status.INVALID_ARGUMENT, f"image {index}: a PIL image of shape {shape} has zero {side}")
    if _resized_here(image):
        image = _package_resize(image, size) if size > 0 else image.convert("RGB")
    if image.mode == "RGB" and _np is not None:
        pixels = _np.asarray(image)  # PIL hands NumPy a bytes copy; anything else is copied here
        return pixels if isinstance(pixels.base, bytes) else pixels.copy()
    stream = io.BytesIO()
    image.save(stream, format="PNG", compress_level=0)
    return stream.getvalue()


def _is_single_image(images) -> bool:
    if isinstance(images, (*_BYTES_LIKE, str, os.PathLike)) or _is_pil(images):
        return True
    return _np is not None and isinstance(images, _np.ndarray) and images.ndim == 3


def _image_list(images) -> list:
    """One image as a list of one, or a sequence of images (a NumPy batch [images, height, width,
    3], or a 1-D object array of images as ``pandas.Series.values`` gives, too) as a list; a NumPy
    array of another rank or dtype is INVALID_ARGUMENT, naming its shape."""
    if _is_single_image(images):
        return [images]
    _refuse_unordered(images, "images")
    if (_np is not None and isinstance(images, _np.ndarray) and images.ndim != 4
            and not (images.ndim == 1 and images.dtype == object)):
        raise Error(Status.INVALID_ARGUMENT,
                    f"images must be a NumPy image [height, width, 3] or batch [images, height, width, 3] of "
                    f"uint8 RGB, a 1-D object array of images, or a sequence of images, not an array of shape "
                    f"{images.shape} {images.dtype}")
    try:
        return list(images)
    except TypeError:
        raise TypeError(f"images must be an image or a sequence of images, not {type(images).__name__}") from None


def _rows_as_c_reads(image) -> bool:
    """Whether a [height, width, 3] uint8 array lies as `uform_image_t` reads pixels: each row's
    bytes contiguous, and rows ascending at least a row apart (a row stride of 0, as
    `numpy.broadcast_to` makes, would mean "packed" to C, and a smaller one overlaps rows)."""
    height, width = image.shape[0], image.shape[1]
    strides = image.strides
    return strides[2] == 1 and (width == 1 or strides[1] == 3) and (height == 1 or strides[0] >= 3 * width)


def _not_regular(mode: int) -> str:
    kind = next((name for test, name in _FILE_KINDS if test(mode)), "another kind of file")
    return f"not a regular file ({kind})"


def _image_file(path, index: int) -> bytes:
    """The bytes of the image file at ``path``, read as the CLI reads one: a regular file of at
    most 1 GiB (a FIFO or a device could block or never end), else INVALID_ARGUMENT naming it.
    Opened without blocking, so a FIFO without a writer is refused rather than waited on."""
    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except (OSError, ValueError) as error:  # missing, unreadable, a NUL in the path, a socket
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        try:  # a socket cannot be opened: named as the other files that are not regular
            mode = os.stat(path).st_mode
        except (OSError, ValueError):
            mode = stat.S_IFREG
        raise Error(Status.INVALID_ARGUMENT, f"image {index}: cannot read {os.fspath(path)!r}: "
                                             f"{reason if stat.S_ISREG(mode) else _not_regular(mode)}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Error(Status.INVALID_ARGUMENT, f"image {index}: cannot read {os.fspath(path)!r}: "
                                                 f"{_not_regular(info.st_mode)}")
        if info.st_size > _IMAGE_FILE_MAX_BYTES:
            raise Error(Status.INVALID_ARGUMENT, f"image {index}: cannot read {os.fspath(path)!r}: larger than 1 GiB "
                                                 f"({info.st_size} bytes)")
        chunks, left = [], info.st_size
        while left:  # what fstat said, as the CLI reads: a file growing meanwhile is not followed
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _numpy_image(image, index: int, kind: str):
    """A NumPy image checked ([height, width, 3] uint8 RGB, neither side zero, else INVALID_ARGUMENT
    naming ``images[index]``), as an array C can read: itself, or a copy where its rows lie otherwise."""
    if image.dtype != _np.uint8 or image.ndim != 3 or image.shape[2] != 3:
        raise Error(Status.INVALID_ARGUMENT, f"image {index}: a NumPy image must be [height, width, 3] uint8 RGB, "
                                             f"not {image.shape} {image.dtype}")
    height, width = image.shape[0], image.shape[1]
    if not width or not height:
        side = "width" if not width else "height"
        raise Error(Status.INVALID_ARGUMENT, f"image {index}: {kind} of shape {image.shape} has zero {side}")
    if _rows_as_c_reads(image):
        return image
    # A copy C can read; capped as decoded images are, so that a broadcast view of a few bytes
    # cannot make it allocate gigabytes.
    if height * width > _COPIED_IMAGE_MAX_PIXELS:
        raise Error(Status.LIMIT_EXCEEDED,
                    f"image {index}: {kind} of shape {image.shape} would be copied for C to read (its rows "
                    f"are not contiguous and ascending), and {height * width} pixels pass the "
                    f"{_COPIED_IMAGE_MAX_PIXELS} that decoded images may have; pass a C-contiguous array")
    return _np.ascontiguousarray(image)


def _image_snapshot(image, index: int, size: int):
    """``images[index]`` as an image processor keeps it, so that what the caller does to it afterwards
    (closes, draws on, refills) does not reach the encoder: a PIL image as `_pil_image` makes it
    (``size`` the model's image side), a NumPy image as a checked copy, ``bytearray`` and
    ``memoryview`` as ``bytes``; bytes, paths and anything else as they are."""
    if _is_pil(image):
        return _pil_image(image, index, size)
    if isinstance(image, (bytearray, memoryview)):
        return memoryview(image).tobytes()
    if _np is not None and isinstance(image, _np.ndarray):
        checked = _numpy_image(image, index, "a NumPy image")
        return checked.copy() if checked is image else checked
    return image


def _image_fields(image, keep: list, index: int, size: int = 0) -> tuple:
    """The fields of one `uform_image_t` (data, size, width, height, stride) for a supported
    Python image (``images[index]``); what ``data`` points to goes to ``keep``. ``size`` is the
    model's image side, which a PIL image in a mode `_resized_here` is resized for."""
    kind = "a NumPy image"
    if _is_pil(image):
        kind = "a PIL image"
        image = _pil_image(image, index, size)
    if isinstance(image, (str, os.PathLike)):
        image = _image_file(image, index)
    if isinstance(image, _BYTES_LIKE):
        data = bytes(image)
        holder = ctypes.create_string_buffer(data, max(len(data), 1))
        keep.append(holder)
        return ctypes.addressof(holder), len(data), 0, 0, 0
    if _np is not None and isinstance(image, _np.ndarray):
        image = _numpy_image(image, index, kind)
        height, width = image.shape[0], image.shape[1]
        keep.append(image)
        stride = image.strides[0] if height > 1 else 3 * width
        return image.ctypes.data, stride * (height - 1) + 3 * width, width, height, stride
    raise TypeError(f"image {index}: an image is bytes, a path, a NumPy array or a PIL image, "
                    f"not {type(image).__name__}")
