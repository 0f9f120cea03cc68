"""Models and encoders: `Model` over ``uform_model_open`` / ``uform_encode_texts`` /
``uform_encode_images``, and `get_model`,
which returns ``(processors, models)`` shaped like the ``uform`` PyPI package's, so its users switch by
changing an import.

>>> import uform
>>> library = uform.Library()
>>> with uform.Model.open(library, "all-MiniLM-L6-v2") as model, \\
...         uform.Executor.for_ram(library) as threads:
...     vectors = model.encode_texts(threads, ["a cat on a mat", "a dog in the fog"])  # (2, 384)

>>> processors, models = uform.get_model("all-MiniLM-L6-v2", modalities=[uform.Modality.TEXT_ENCODER])
>>> embeddings = models[uform.Modality.TEXT_ENCODER].encode(processors[uform.Modality.TEXT_ENCODER]("a cat"))

>>> processors, models = uform.get_model("uform3-image-text-english-small", modalities=["image_encoder"])
>>> vectors = models["image_encoder"].encode(processors["image_encoder"](["cat.jpg", open("dog.png", "rb").read()]))

>>> processors, models = uform.get_model("uform3-image-text-english-small")  # every tower the directory holds
>>> text = models[uform.Modality.TEXT_ENCODER].encode(processors[uform.Modality.TEXT_ENCODER]("a cat"))
>>> pixels = processors[uform.Modality.IMAGE_ENCODER](PIL.Image.open("cat.jpg"))  # {"images": [...]}
>>> image = models[uform.Modality.IMAGE_ENCODER].encode(pixels)

Where `get_model`'s processors and encoders differ from the ``uform`` package's (processors that
do not preprocess: the engine tokenises and decodes; token ids refused) is told in ``_encoders.py``
and python/README.md; ``encode(x, return_features=True)`` returns ``(features, embeddings)`` as the
package does.

Embeddings come back as NumPy arrays when NumPy is importable (float32 for f32, float16 for f16, and
uint16 holding the raw bits for bf16, which NumPy lacks), else as lists of lists of floats.
"""

from __future__ import annotations

import ctypes
import enum
import struct
import threading
import weakref
from ctypes import POINTER, Structure, c_char_p, c_int, c_size_t, c_void_p
from dataclasses import dataclass

from . import _native
from ._arguments import _require, _size
from ._codes import DType, Residency, Status
from ._errors import Error, _check
from ._executor import Executor
from ._hardware import Library
from ._inputs import (
    _EMBEDDING_BYTES,
    _embedding_dtype,
    _image_fields,
    _image_list,
    _member,
    _model_path,
    _np,
    _resized_here,
    _text_bytes,
    _text_list,
)
from ._lifetime import _Handle, _Owner, _release_model
from ._options import RamOptions, VramOptions

c_enum = c_int


class ModelOptionsStruct(Structure):
    """`uform_model_options_t`"""

    _fields_ = [
        ("path", c_char_p),
        ("modality", c_enum),
        ("residency", c_enum),
        ("ram", POINTER(_native.RamOptionsStruct)),
        ("vram", POINTER(_native.VramOptionsStruct)),
        ("weights_dtype", c_enum),
    ]


class ModelDescriptionStruct(Structure):
    """`uform_model_description_t`"""

    _fields_ = [
        ("modality", c_enum),
        ("residency", c_enum),
        ("weights_dtype", c_enum),
        ("dimensions", c_size_t),
        ("matryoshka_dimensions", c_size_t * 8),
        ("context", c_size_t),
        ("image_size", c_size_t),
        ("layers", c_size_t),
        ("parameters", c_size_t),
        ("replicas", c_size_t),
        ("hidden", c_size_t),
        ("tokens", c_size_t),
    ]


class EmbeddingsStruct(Structure):
    """`uform_embeddings_t`"""

    _fields_ = [
        ("data", c_void_p),
        ("stride", c_size_t),
        ("dimensions", c_size_t),
        ("dtype", c_enum),
        ("normalize", c_int),
        ("features", c_void_p),
        ("features_stride", c_size_t),
    ]


class ImageStruct(Structure):
    """`uform_image_t`"""

    _fields_ = [
        ("data", c_void_p),
        ("size", c_size_t),
        ("width", c_size_t),
        ("height", c_size_t),
        ("stride", c_size_t),
    ]


_P = POINTER
PROTOTYPES = {
    "uform_model_open": (c_enum, [_P(ModelOptionsStruct), _P(c_void_p)]),
    "uform_model_describe": (c_enum, [c_void_p, _P(ModelDescriptionStruct)]),
    "uform_model_free": (None, [c_void_p]),
    "uform_model_tokenize": (c_enum, [c_void_p, c_char_p, c_size_t, _P(ctypes.c_int32), c_size_t, _P(c_size_t)]),
    "uform_encode_texts": (
        c_enum,
        [c_void_p, c_void_p, _P(c_char_p), _P(c_size_t), c_size_t, _P(EmbeddingsStruct), _P(c_enum),
         _P(_native.OutcomeStruct)],
    ),
    "uform_encode_images": (
        c_enum,
        [c_void_p, c_void_p, _P(ImageStruct), c_size_t, _P(EmbeddingsStruct), _P(c_enum), _P(_native.OutcomeStruct)],
    ),
}

_declared_lock = threading.Lock()


def _functions(library):
    """The model functions of a loaded library, their prototypes declared once."""
    native = library._native
    functions = getattr(native, "_model_functions", None)
    if functions is not None:
        return functions
    with _declared_lock:
        functions = {}
        for name, (restype, argtypes) in PROTOTYPES.items():
            try:
                function = getattr(native.dll, name)
            except AttributeError:
                raise Error(Status.UNSUPPORTED, f"{native.path} lacks `{name}`; rebuild libuform from this checkout") from None
            function.restype, function.argtypes = restype, argtypes
            functions[name] = function
        native._model_functions = functions
    return functions


class Modality(enum.Enum):
    """Which tower: the ``uform`` package's members, names and values (`uform.shared.Modality`).
    The engine has the text and image encoders (`uform_modality_t` in C); VIDEO_ENCODER and
    TEXT_DECODER exist so that code naming them runs, and opening them is `Error(UNSUPPORTED)`."""

    TEXT_ENCODER = "text_encoder"
    IMAGE_ENCODER = "image_encoder"
    VIDEO_ENCODER = "video_encoder"
    TEXT_DECODER = "text_decoder"

    @property
    def code(self) -> int:
        """The `uform_modality_t` value: 0 for the text tower, 1 for the image tower; the towers the
        engine lacks have none (`Error(UNSUPPORTED)`)."""
        return _ENGINE_HAS.index(_modality(self))


#: The modalities the engine has a tower for, in `uform_modality_t` order.
_ENGINE_HAS = (Modality.TEXT_ENCODER, Modality.IMAGE_ENCODER)

#: Modalities the ``uform`` package names (`uform.shared.Modality`) that the engine has no tower for.
_ENGINE_LACKS = ("video_encoder", "text_decoder")


def _modality(value) -> Modality:
    """``value`` as a `Modality`: a member; a string, as the ``uform`` package spells it (the value,
    "text_encoder") or as the member's name ("TEXT_ENCODER", "text_encoder") or its first word
    ("text"); a member of another string-valued enumeration, the ``uform`` package's own `Modality`
    included, by its value; or the `uform_modality_t` code (0, 1). VIDEO_ENCODER and TEXT_DECODER
    (members, or the package's spellings) are `Error(UNSUPPORTED)`, anything else
    `Error(INVALID_ARGUMENT)`."""
    if isinstance(value, Modality) and value in _ENGINE_HAS:
        return value
    spelling = value.value if isinstance(value, enum.Enum) and isinstance(value.value, str) else value
    if isinstance(spelling, str):
        for m in _ENGINE_HAS:
            if spelling in (m.value, m.name, m.name.lower(), m.value.split("_")[0]):
                return m
        if spelling.lower() in _ENGINE_LACKS:
            raise Error(Status.UNSUPPORTED, f"modality {spelling!r}: the engine has text and image encoders only "
                                            f"(Modality.TEXT_ENCODER, Modality.IMAGE_ENCODER)")
    if isinstance(value, int) and not isinstance(value, bool) and value in (0, 1):
        return Modality.TEXT_ENCODER if value == 0 else Modality.IMAGE_ENCODER
    raise Error(Status.INVALID_ARGUMENT, f"modality must be TEXT_ENCODER or IMAGE_ENCODER, not {value!r}")


@dataclass(frozen=True)
class ModelDescription:
    """`uform_model_description_t`."""

    modality: Modality
    residency: object
    weights_dtype: object
    dimensions: int
    matryoshka_dimensions: tuple
    context: int
    image_size: int
    layers: int
    parameters: int
    replicas: int
    #: The width of the tower's hidden states (a row of features) and the rows of one item's
    #: features (texts: the context; images: [CLS], registers and patches).
    hidden: int = 0
    tokens: int = 0


class Model(_Owner):
    """One open tower (`uform_model_t`), immutable, freed by `close`, a ``with`` block or the
    garbage collector. Any number of executors on any threads may use it at once; `close` waits for
    none of them: it refuses (CONTENDED) while a call uses the model."""

    def __init__(self, library, handle: int):
        """Adopts a handle `uform_model_open` just returned; `Model.open` is how one is made."""
        _require(library, Library, "library")
        self._library = library
        self._functions = _functions(library)
        self._state = _Handle("model", self._functions, handle, closed=not handle)
        # Frees the handle once: at `close`, when garbage-collected, or at interpreter exit.
        self._finalizer = weakref.finalize(self, _release_model, self._state) if handle else None

    @classmethod
    def open(cls, library, path, modality=Modality.TEXT_ENCODER, *, residency=None, ram=None,
             weights_dtype=None, vram=None) -> "Model":
        """`uform_model_open`: ``path`` a model directory (UForm3 or sentence-transformers; a
        ``str``, ``bytes`` or ``os.PathLike``); ``residency`` RAM (default) or VRAM; ``ram`` a
        `RamOptions` (replicas per NUMA node); ``vram`` a `VramOptions` (one weights copy per
        device; None derives one free device); ``weights_dtype`` F32 (default), BF16 or F16.
        Raises `Error` (CORRUPT_FILE, UNSUPPORTED, ...; INVALID_ARGUMENT for an empty path or one
        with a NUL byte), and `TypeError` for an argument of the wrong type."""
        _require(library, Library, "library")
        functions = _functions(library)
        options = ModelOptionsStruct()
        encoded_path = _model_path(path)
        options.path = encoded_path
        options.modality = _modality(modality).code
        options.residency = _member(Residency, Residency.RAM if residency is None else residency, "residency",
                                    (Residency.RAM, Residency.VRAM))
        options.weights_dtype = _member(DType, DType.F32 if weights_dtype is None else weights_dtype,
                                        "weights_dtype", _EMBEDDING_BYTES)
        if ram is not None:
            _require(ram, RamOptions, "ram")
            ram_struct = ram.arguments()
            options.ram = ctypes.pointer(ram_struct)
        if vram is not None:
            _require(vram, VramOptions, "vram")
            vram_struct = vram.arguments()
            options.vram = ctypes.pointer(vram_struct)
        handle = c_void_p()
        _check(library._native, functions["uform_model_open"](ctypes.byref(options), ctypes.byref(handle)))
        if not handle.value:
            raise Error(Status.INVALID_ARGUMENT, "uform_model_open returned no model")
        return cls(library, handle.value)

    def close(self) -> None:
        """`uform_model_free`. Closing twice is harmless. Raises `Error(CONTENDED)`, freeing
        nothing, while another thread is inside a call that uses the model (`encode_texts`,
        `encode_images`, `tokenize`, `describe`). Without `close`, the same happens when the model
        is garbage-collected or at exit."""
        if not self._close_state():
            return
        if self._finalizer is not None:
            self._finalizer()  # `_release_model`, once

    def describe(self) -> ModelDescription:
        """`uform_model_describe`."""
        d = ModelDescriptionStruct()
        self._state.run(lambda: _check(
            self._library._native, self._functions["uform_model_describe"](self._handle, ctypes.byref(d))))
        return ModelDescription(
            modality=Modality.TEXT_ENCODER if d.modality == 0 else Modality.IMAGE_ENCODER,
            residency=Residency(d.residency), weights_dtype=DType(d.weights_dtype), dimensions=d.dimensions,
            matryoshka_dimensions=tuple(x for x in d.matryoshka_dimensions if x), context=d.context,
            image_size=d.image_size, layers=d.layers, parameters=d.parameters, replicas=d.replicas,
            hidden=d.hidden, tokens=d.tokens)

    def tokenize(self, text) -> list:
        """`uform_model_tokenize`: the ids the encoder sees (specials included, truncated). ``text``
        is a ``str`` or bytes-like (UTF-8); invalid UTF-8, a lone surrogate included, raises
        `Error(INVALID_ARGUMENT)`."""
        data = _text_bytes(text, "text")
        count = c_size_t()
        tokenize = self._functions["uform_model_tokenize"]
        native = self._library._native

        def tokens():
            _check(native, tokenize(self._handle, data, len(data), None, 0, ctypes.byref(count)))
            ids = (ctypes.c_int32 * max(count.value, 1))()
            _check(native, tokenize(self._handle, data, len(data), ids, count.value, ctypes.byref(count)))
            return ids

        ids = self._state.run(tokens)
        return list(ids[: count.value])

    def encode_texts(self, executor, texts, *, dimensions: int = 0, normalize: bool = False, dtype=None,
                     statuses: bool = False, features: bool = False, feature_rows: int = 0):
        """`uform_encode_texts`, blocking, on ``executor`` (an `Executor`; None runs inline on this
        thread). ``texts`` is one text or a sequence of them, each a ``str`` or bytes-like
        (``bytes``, ``bytearray``, ``memoryview``: UTF-8, passed as they are); anything else is a
        `TypeError` naming its index. Returns an array [texts, dimensions] (NumPy when importable:
        float32, float16, or uint16 bits for BF16), and with ``statuses=True`` also the per-text
        `Status` list, invalid UTF-8 (a lone surrogate in a ``str`` too) getting INVALID_ARGUMENT
        and a zero row; without it a bad text raises `Error` naming its index.

        ``features=True`` also returns the tower's last hidden states, before the embeddings (as
        the ``uform`` package's ``return_features=True``): ``(features, embeddings)``, or
        ``(features, embeddings, statuses)``; features are [texts, tokens, hidden] of ``dtype``
        (`ModelDescription`'s ``tokens`` and ``hidden``), a text's tokens in order, specials
        included, then zero rows (a bad text's all zero). ``feature_rows`` (0: ``tokens``) gives
        each text that many rows instead, the engine writing the first ``tokens`` straight into the
        array (no copy) and the rest zero; fewer than ``tokens`` is `Error(INVALID_ARGUMENT)`."""
        executor = self._executor(executor)
        encoded = [_text_bytes(text, f"texts[{index}]") for index, text in enumerate(_text_list(texts))]
        count = len(encoded)
        dtype, element = _embedding_dtype(dtype)
        dimensions = _size(dimensions, "dimensions")
        pointers = (c_char_p * max(count, 1))(*encoded)
        lengths = (c_size_t * max(count, 1))(*[len(t) for t in encoded])
        items = (c_enum * max(count, 1))() if statuses else None
        native = self._library._native

        def encode():
            width = self._width(dimensions)
            buffer, address = self._output((count, width), element, dtype)
            hidden = self._features(features, count, element, dtype, feature_rows)
            out = EmbeddingsStruct(address, 0, dimensions, int(dtype), 1 if normalize else 0,
                                   hidden[1] if hidden else None, hidden[3] if hidden else 0)

            def on_executor():
                status = self._functions["uform_encode_texts"](
                    executor._handle, self._handle, pointers, lengths, count, ctypes.byref(out), items, None)
                _check(native, status)

            executor._state.run(on_executor)
            return width, buffer, hidden

        width, buffer, hidden = self._state.run(encode)
        return self._rows(buffer, (count, width), element, dtype, items if statuses else None, hidden)

    def encode_images(self, executor, images, *, dimensions: int = 0, normalize: bool = False, dtype=None,
                      statuses: bool = False, features: bool = False, feature_rows: int = 0):
        """`uform_encode_images`, blocking, on ``executor`` (an `Executor`; None runs inline on this
        thread). ``images`` is one image or a sequence of them (a NumPy array [images, height,
        width, 3] or a 1-D object array of images too), each encoded JPEG or PNG ``bytes`` (or
        ``bytearray``, ``memoryview``), a file path (``str`` or ``os.PathLike``; a regular file of
        at most 1 GiB, else `Error(INVALID_ARGUMENT)` before reading), a NumPy array [height, width,
        3] of uint8 RGB, or a PIL image; an item of another type is a `TypeError`. Decoding and
        preprocessing run in C on the executor's threads, as PIL and the ``uform`` package's
        processor do. A PIL image is read when this is called. In mode RGB it is
        passed as its pixels; in modes PNG holds (1, L, LA, P, RGBA, I;16) it travels as an
        uncompressed PNG, so C resizes it in its own mode as PIL does; in other modes (CMYK, YCbCr,
        LAB, HSV, I, F, PA, ...) it is resized here, in its own mode, to the model's image size and
        then made RGB, as the package's PyTorch processor does (torchvision's ``Resize`` with PIL's
        bicubic filter, then ``convert("RGB")``), and C centre-crops those pixels. Returns
        an array [images, dimensions] as `encode_texts`, and with ``statuses=True`` also the
        per-image `Status` list (an undecodable image gets CORRUPT_FILE, or UNSUPPORTED for a legal
        one this build cannot decode such as a lossless JPEG, and a zero row); without it
        an undecodable image raises `Error` naming its index. A NumPy image of another shape or
        dtype, or of zero width or height, raises `Error(INVALID_ARGUMENT)` naming its index.
        ``features=True`` also returns the features first, as `encode_texts` does: [images, tokens,
        hidden], [CLS], the register tokens, then the patches row by row, after the final
        LayerNorm (an undecodable image's all zero); ``feature_rows`` as for `encode_texts`."""
        executor = self._executor(executor)
        keep = []
        images = _image_list(images)
        size = self.describe().image_size if any(_resized_here(image) for image in images) else 0
        items = [ImageStruct(*_image_fields(image, keep, index, size)) for index, image in enumerate(images)]
        count = len(items)
        dtype, element = _embedding_dtype(dtype)
        dimensions = _size(dimensions, "dimensions")
        array_of_images = (ImageStruct * max(count, 1))(*items)
        codes = (c_enum * max(count, 1))() if statuses else None
        native = self._library._native

        def encode():
            width = self._width(dimensions)
            buffer, address = self._output((count, width), element, dtype)
            hidden = self._features(features, count, element, dtype, feature_rows)
            out = EmbeddingsStruct(address, 0, dimensions, int(dtype), 1 if normalize else 0,
                                   hidden[1] if hidden else None, hidden[3] if hidden else 0)

            def on_executor():
                status = self._functions["uform_encode_images"](
                    executor._handle, self._handle, array_of_images, count, ctypes.byref(out), codes, None)
                _check(native, status)

            executor._state.run(on_executor)
            return width, buffer, hidden

        width, buffer, hidden = self._state.run(encode)
        del keep
        return self._rows(buffer, (count, width), element, dtype, codes if statuses else None, hidden)

    def _executor(self, executor) -> Executor:
        """The executor an encode runs on: ``executor``, or the inline one for None."""
        if executor is None:
            return Executor(self._library)
        if not isinstance(executor, Executor):
            raise TypeError(f"executor must be a uform.Executor or None (inline), not {executor!r}")
        return executor

    def _width(self, dimensions: int) -> int:
        """Elements per row the output holds: ``dimensions``, 0 taking the model's width; a wider
        request is sized as the model's width, and the engine refuses it, naming both."""
        full = self.describe().dimensions
        return min(dimensions, full) if dimensions else full

    @staticmethod
    def _output(shape, element, dtype, zeroed=False) -> tuple:
        """Where the engine writes an array of ``shape`` (zeroed where asked: ctypes buffers always
        are), and its address: with NumPy the array returned itself (no copy afterwards), else a
        ctypes buffer `_unpack` reads."""
        if _np is not None:
            kind = {DType.F32: _np.float32, DType.F16: _np.float16, DType.BF16: _np.uint16}[dtype]
            array = (_np.zeros if zeroed else _np.empty)(shape, dtype=kind)
            return array, c_void_p(array.ctypes.data if array.size else None)
        size = 1
        for extent in shape:
            size *= extent
        buffer = (ctypes.c_char * max(size * element, 1))()
        return buffer, ctypes.cast(buffer, c_void_p)

    def _features(self, wanted, count, element, dtype, rows=0):
        """With ``wanted``, ``(buffer, address, shape, stride)`` for the features of ``count`` items:
        [count, tokens, hidden] as the description gives them, or [count, rows, hidden] zeroed
        (stride: the bytes of ``rows`` rows; 0 packs); else None."""
        rows = _size(rows, "feature_rows")
        if not wanted:
            return None
        d = self.describe()
        if not rows or rows == d.tokens:
            shape = (count, d.tokens, d.hidden)
            return self._output(shape, element, dtype) + (shape, 0)
        if rows < d.tokens:
            raise Error(Status.INVALID_ARGUMENT,
                        f"feature_rows is {rows}: fewer than the {d.tokens} rows of the model's features")
        shape = (count, rows, d.hidden)
        return self._output(shape, element, dtype, zeroed=True) + (shape, rows * d.hidden * element)

    @staticmethod
    def _unpack(buffer, shape, element, dtype):
        """The array itself (NumPy), or the buffer as nested lists of ``shape``."""
        if _np is not None:
            return buffer
        code = {DType.F32: "f", DType.F16: "e", DType.BF16: "H"}[dtype]
        size = 1
        for extent in shape:
            size *= extent
        flat = list(struct.unpack(f"<{size}{code}", bytes(buffer)[: size * element]))
        for extent in reversed(shape[1:]):
            flat = [flat[i:i + extent] for i in range(0, len(flat), extent)]
        return flat

    @classmethod
    def _rows(cls, buffer, shape, element, dtype, codes, features=None):
        """What an encode returns: the rows, after the features where asked, then the statuses
        where asked."""
        result = (cls._unpack(buffer, shape, element, dtype),)
        if features is not None:
            result = (cls._unpack(features[0], features[2], element, dtype),) + result
        if codes is not None:
            result += ([Status(codes[i]) for i in range(shape[0])],)
        return result if len(result) > 1 else result[0]

    def __repr__(self) -> str:
        return "uform.Model(closed)" if self.closed else f"uform.Model(0x{self._handle:x})"


# The `uform` package's shapes over `Model` (processors, encoders, `get_model`), last: they use it.
from ._encoders import ImageEncoder, ImageProcessor, TextEncoder, TextProcessor  # noqa: E402,F401
from ._get_model import get_model  # noqa: E402,F401

for _moved in (ImageEncoder, ImageProcessor, TextEncoder, TextProcessor, get_model):
    _moved.__module__ = __name__  # where they were defined before the split, and where users find them
del _moved
