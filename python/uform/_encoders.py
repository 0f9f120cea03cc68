"""What `uform.get_model` returns, shaped like the ``uform`` PyPI package's ``(processors,
models)``: `TextProcessor` and `TextEncoder`, `ImageProcessor` and `ImageEncoder`, each over one
`Model` and an `Executor`. Re-exported by `uform.models` (and `get_model` by `uform`).

Where they differ from the ``uform`` package (3.x), and why:

- ``model_name`` is a local model directory; nothing is downloaded (``token`` is accepted and
  ignored, and so is ``backend``, "onnx" or "torch": the engine is the backend).
- ``encode(x, return_features=True)`` returns ``(features, embeddings)`` as the package does: the
  tower's last hidden states (``uform_embeddings_t.features``), float32 [items, tokens, hidden].
  A text's rows past its tokens are zeros, where the package pads to its context and returns the
  tower's values for the padding tokens (which its attention mask hides); the rows a text has are
  the same. ``encode(x)`` returns the embeddings alone, as the package's PyTorch backend does (its
  ONNX backend, the default, returns ``(features, embeddings)`` unless told otherwise): an
  encoder's ``return_features`` attribute, False, is the default, as in the package.
- The processors do not preprocess: the engine tokenizes the texts and decodes, resizes and
  normalises the images itself, in C on the encoder's threads. `TextProcessor` returns the ids for
  inspection plus the texts, which are what the encoder reads; `ImageProcessor` returns the images
  as they came, in a list under ``"images"``.
- The encoders take this package's processor output, or the texts and images themselves; the image
  encoder also takes the ``uform`` package's preprocessed pixels (its ONNX processor's float array
  [images, 3, size, size], or its PyTorch processor's ``{"images": tensor}``), which it takes back
  to the 8-bit pixels they were made from. Token ids (the ``uform`` package's text processor
  output) are refused: the engine takes texts, not ids.
- Embeddings are NumPy float32 arrays [items, dimensions] (lists of lists without NumPy), never
  PyTorch tensors: this package does not depend on PyTorch.
"""

from __future__ import annotations

import enum
import json
import os
import re
from typing import Optional

from ._codes import Status
from ._errors import Error
from ._inputs import _BYTES_LIKE, _image_list, _is_pil, _model_path, _np, _text_list
from .models import Model, Modality, _modality


class _ByModality(dict):
    """The ``processors`` and ``models`` dicts: keyed by `Modality`, as the ``uform`` package's,
    and also found by any spelling `Modality` accepts ("image_encoder", "image", the ``uform``
    package's own ``Modality.IMAGE_ENCODER``)."""

    def _key(self, key):
        if isinstance(key, Modality):
            return None
        try:
            return _modality(key)
        except Exception:  # noqa: BLE001 - an unknown key is simply absent
            return None

    def __missing__(self, key):
        modality = self._key(key)
        if modality is None or not dict.__contains__(self, modality):
            raise KeyError(key)
        return dict.__getitem__(self, modality)

    def __contains__(self, key) -> bool:
        if dict.__contains__(self, key):
            return True
        modality = self._key(key)
        return modality is not None and dict.__contains__(self, modality)

    def get(self, key, default=None):
        return self[key] if key in self else default


def _wants_features(encoder, return_features) -> bool:
    """Whether ``encode`` returns the features too: ``return_features``, or for None the
    encoder's ``return_features`` attribute, as the ``uform`` package decides."""
    return bool(encoder.return_features if return_features is None else return_features)


def _ids_refused():
    from . import Error, Status

    return Error(Status.UNSUPPORTED,
                 "encode got token ids (as the uform package's TextProcessor returns: 'input_ids' and "
                 "'attention_mask' without 'texts'), but the engine tokenizes texts itself and its C ABI takes "
                 "no ids; pass the texts, or what this package's TextProcessor (processors[Modality.TEXT_ENCODER]) "
                 "returns, which carries them under 'texts'")


def _is_tensor(x) -> bool:
    """An array-like of another library (a PyTorch tensor, ...): ``shape`` and ``dtype`` and
    convertible by NumPy, not a NumPy array, a text or a PIL image."""
    return (not isinstance(x, (str, *_BYTES_LIKE, list, tuple, dict)) and not _is_pil(x)
            and not (_np is not None and isinstance(x, _np.ndarray))
            and hasattr(x, "shape") and hasattr(x, "dtype") and (hasattr(x, "__array__") or hasattr(x, "numpy")))


def _tensor_array(tensor) -> tuple:
    """A tensor in host memory as a NumPy array, and "bfloat16" where it was one (else None):
    detached from autograd first, and a bfloat16 one made float32 (which holds each of its values
    exactly; NumPy has no bfloat16). A `TypeError` where NumPy still cannot read it, advising
    ``.cpu()`` only for a tensor on a device."""
    detach = getattr(tensor, "detach", None)
    if callable(detach):
        tensor = detach()
    device = getattr(getattr(tensor, "device", None), "type", "cpu")
    bfloat16 = "bfloat16" if str(tensor.dtype).endswith("bfloat16") else None
    if bfloat16 and device == "cpu" and callable(getattr(tensor, "float", None)):
        tensor = tensor.float()
    try:
        return _np.asarray(tensor), bfloat16
    except (TypeError, RuntimeError, ValueError) as error:
        advice = f"; it is on {device}: pass it in host memory (.cpu())" if device != "cpu" else ""
        raise TypeError(f"images: a {type(tensor).__name__} NumPy cannot read ({error}){advice}") from None


def _looks_like_ids(x) -> bool:
    """Whether ``x`` is token ids rather than texts: an integer array or tensor, or a sequence of
    integers or of sequences of integers."""
    if _np is not None and isinstance(x, _np.ndarray):
        return x.dtype.kind in "iub"
    if _is_tensor(x):
        return True
    if isinstance(x, (list, tuple)) and x:
        first = x[0]
        if isinstance(first, int) and not isinstance(first, bool):
            return True
        if _np is not None and isinstance(first, _np.ndarray):
            return first.dtype.kind in "iub"
        return (isinstance(first, (list, tuple)) and bool(first)
                and all(isinstance(i, int) and not isinstance(i, bool) for i in first))
    return False


def _text_shape(directory: bytes, model: Model) -> tuple:
    """``(length, padding)``: the rows the ``uform`` package's text processor pads each text to and
    the id it pads with, ``config.json``'s ``text_encoder.max_position_embeddings`` and
    ``padding_idx`` (UForm3), never fewer rows than the model's context; else (a sentence-transformers
    directory) the model's context and 0."""
    context = model.describe().tokens
    try:
        with open(os.path.join(directory, b"config.json"), "rb") as file:
            section = json.load(file)["text_encoder"]
        length, padding = int(section["max_position_embeddings"]), int(section["padding_idx"])
    except (OSError, ValueError, KeyError, TypeError):
        return context, 0
    return max(length, context), padding


class TextProcessor:
    """What ``processors[Modality.TEXT_ENCODER]`` is: ``processor(texts)`` returns

    - ``"input_ids"``: the ids the encoder sees, [texts, length] (specials included, truncated to the
      model's context), padded with ``padding`` after each text's ids;
    - ``"attention_mask"``: 1 over each text's ids, 0 over the padding, the same shape;
    - ``"texts"``: the texts themselves, a list, which is what `TextEncoder.encode` encodes.

    `get_model` pads as the ``uform`` package's processor does: to ``config.json``'s
    ``max_position_embeddings`` with its ``padding_idx`` (UForm3), else to the model's context with
    0; the encoder's features have as many rows, so the mask weighs them. ``input_ids`` and
    ``attention_mask`` are int64 NumPy arrays when NumPy is importable (lists of lists otherwise).
    Unlike the package's, they are for inspection and for weighing features only: the engine
    tokenizes the texts again itself."""

    def __init__(self, model: Model, length: Optional[int] = None, padding: int = 0):
        """Tokenizes with ``model``'s tokenizer; pads to ``length`` rows (None: the model's context)
        with the id ``padding``."""
        self._model = model
        self._length = model.describe().tokens if length is None else length
        self._padding = padding

    def __call__(self, texts) -> dict:
        """``{"input_ids", "attention_mask", "texts"}`` for one text (a ``str`` or bytes-like) or a
        sequence of them."""
        texts = _text_list(texts)
        ids = [self._model.tokenize(t) for t in texts]
        width = max([self._length] + [len(i) for i in ids])
        padded = [i + [self._padding] * (width - len(i)) for i in ids]
        mask = [[1] * len(i) + [0] * (width - len(i)) for i in ids]
        if _np is not None:
            padded, mask = _np.array(padded, dtype=_np.int64).reshape(len(ids), width), _np.array(mask, dtype=_np.int64).reshape(len(ids), width)
        return {"input_ids": padded, "attention_mask": mask, "texts": texts}


class TextEncoder:
    """What ``models[Modality.TEXT_ENCODER]`` is: ``encode(x)`` returns the embeddings [texts,
    dimensions], and ``encode(x, return_features=True)`` ``(features, embeddings)``, features
    [texts, length, hidden] (the rows `TextProcessor` pads to), as the ``uform`` package's encoder
    does. ``return_features`` is False, as the package's PyTorch encoder's; set True, it is
    ``encode``'s default."""

    def __init__(self, model: Model, executor, length: Optional[int] = None):
        """Encodes with ``model`` on ``executor`` (an `Executor`, or None to run inline); features
        get ``length`` rows (None: the model's context)."""
        self.model = model
        self.executor = executor
        self._length = length
        self.return_features = False
        #: The embedding width, as the package's encoders name it.
        self.embedding_dim = model.describe().dimensions

    def encode(self, x, attention_mask=None, return_features: Optional[bool] = None):
        """The embeddings [texts, dimensions] (float32 NumPy, or lists without NumPy) of ``x``: what
        `TextProcessor` returned (its ``"texts"`` are encoded), one text (a ``str`` or bytes-like),
        or a sequence of texts (a list, a tuple, a NumPy array of strings). ``attention_mask`` is
        accepted for the package's signature and unused.

        With ``return_features=True`` (or the attribute set), ``(features, embeddings)``: features
        float32 [texts, length, hidden], each text's last hidden states in token order (specials
        included), then zero rows (as many rows as `TextProcessor`'s mask has columns).

        Refuses, with `Error(UNSUPPORTED)`, token ids (the ``uform`` package's processor output, an
        integer array or tensor, lists of ints): the engine tokenizes texts itself and takes no ids."""
        from . import Error, Status

        if isinstance(x, dict):
            if "texts" in x:
                texts = x["texts"]
            elif "input_ids" in x:
                raise _ids_refused()
            else:
                raise Error(Status.INVALID_ARGUMENT,
                            f"encode takes what a text processor returned ({{'texts': ...}}) or texts, not a dict "
                            f"of {sorted(map(str, x))}")
        else:
            texts = x
        if _looks_like_ids(texts):
            raise _ids_refused()
        if not _wants_features(self, return_features):
            return self.model.encode_texts(self.executor, texts)
        return self.model.encode_texts(self.executor, texts, features=True, feature_rows=self._length or 0)

    __call__ = encode
    forward = encode


class ImageProcessor:
    """What ``processors[Modality.IMAGE_ENCODER]`` is: ``processor(images)`` returns
    ``{"images": [...]}``, the images as they came (one image becomes a list of one; a NumPy batch
    [images, height, width, 3] a list of its images), which `ImageEncoder.encode` accepts. Each image
    is encoded JPEG or PNG bytes, a file path, a NumPy array [height, width, 3] of uint8 RGB, or a
    PIL image.

    Unlike the ``uform`` package's processor it does not resize, crop or normalise, so it returns no
    pixel tensor: the engine decodes and preprocesses (as the package's processor does, with PIL's
    bicubic filter) in C on the encoder's threads."""

    def __init__(self, model: Model):
        """Gathers images for ``model``'s encoder."""
        self._model = model

    def __call__(self, images) -> dict:
        """``{"images": [...]}`` for one image or a sequence of them."""
        return {"images": _image_list(images)}


class ImageEncoder:
    """What ``models[Modality.IMAGE_ENCODER]`` is: ``encode(x)`` returns the embeddings [images,
    dimensions], and ``encode(x, return_features=True)`` ``(features, embeddings)``, features
    [images, tokens, hidden], as the ``uform`` package's encoder does. ``normalization`` is the
    model's ``(normalization_means, normalization_deviations)``, which `get_model` reads from
    ``config.json``; with it the encoder also takes the ``uform`` package's preprocessed pixels.
    ``return_features`` is False; set True, it is ``encode``'s default."""

    def __init__(self, model: Model, executor, normalization=None):
        """Encodes with ``model`` on ``executor`` (an `Executor`, or None to run inline)."""
        self.model = model
        self.executor = executor
        self.normalization = normalization
        self.return_features = False
        description = model.describe()
        #: The embedding width and the side of the square the images are resized and cropped to,
        #: as the package's encoders name them.
        self.embedding_dim, self.image_size = description.dimensions, description.image_size

    def encode(self, x, return_features: Optional[bool] = None):
        """The embeddings [images, dimensions] (float32 NumPy, or lists without NumPy) of ``x``: what
        `ImageProcessor` returned; one image or a sequence of images (bytes, paths, uint8 NumPy
        arrays [height, width, 3] or a batch [images, height, width, 3], PIL images); or what the
        ``uform`` package's image processor returned: a float array [images, 3, size, size] (its
        ONNX processor) or ``{"images": tensor}`` (its PyTorch processor; a CPU tensor, bfloat16 or
        requiring grad too), whose values are taken back to the 8-bit pixels they were normalised
        from (an array that is not such pixels for this model is refused with
        `Error(INVALID_ARGUMENT)`).

        With ``return_features=True`` (or the attribute set), ``(features, embeddings)``: features
        float32 [images, tokens, hidden]: [CLS], the register tokens, then the patches row by row,
        after the final LayerNorm, as the package's ``forward_features``."""
        from . import Error, Status

        if isinstance(x, dict):
            if "images" not in x:
                raise Error(Status.INVALID_ARGUMENT,
                            f"encode takes what an image processor returned ({{'images': ...}}) or images, not a "
                            f"dict of {sorted(map(str, x))}")
            images = x["images"]
        else:
            images = x
        return self.model.encode_images(self.executor, self._pixels(images),
                                        features=_wants_features(self, return_features))

    def _pixels(self, images):
        """``images``, with a tensor made a NumPy array and the ``uform`` package's normalised
        float pixels [images, 3, size, size] made uint8 RGB [images, size, size, 3] again."""
        from . import Error, Status

        coarse = None  # a float type too narrow to hold normalised pixels to 0.01 of a level
        if _is_tensor(images):
            if _np is None:
                raise Error(Status.UNSUPPORTED, f"images: a {type(images).__name__} needs NumPy to be read")
            images, coarse = _tensor_array(images)
        if _np is None or not isinstance(images, _np.ndarray) or images.dtype.kind != "f":
            return images
        if images.dtype.itemsize < 4:
            coarse = str(images.dtype)
        if images.ndim != 4 or images.shape[1] != 3:
            raise Error(Status.INVALID_ARGUMENT,
                        f"images: a float array is taken as the uform package's preprocessed pixels [images, 3, "
                        f"size, size], not one of shape {images.shape}; pass uint8 RGB [height, width, 3] or the "
                        f"images themselves")
        size = self.model.describe().image_size
        if images.shape[2:] != (size, size):
            raise Error(Status.INVALID_ARGUMENT,
                        f"images: preprocessed pixels of shape {images.shape} are not [images, 3, {size}, {size}], "
                        f"what this model sees; pass the images themselves")
        if self.normalization is None:
            raise Error(Status.UNSUPPORTED,
                        "images: preprocessed pixels [images, 3, size, size] need the model's normalization_means "
                        "and normalization_deviations, which this ImageEncoder was made without (get_model reads "
                        "them from config.json); pass the images themselves")
        means, deviations = (_np.asarray(v, dtype=_np.float64).reshape(1, 3, 1, 1) for v in self.normalization)
        values = (images.astype(_np.float64) * deviations + means) * 255.0
        nearest = _np.rint(values)
        if values.size and (not _np.isfinite(values).all() or float(_np.abs(values - nearest).max()) > 0.01
                            or float(nearest.min()) < 0 or float(nearest.max()) > 255):
            raise Error(Status.INVALID_ARGUMENT,
                        "images: this float array is not 8-bit pixels normalised with this model's "
                        "normalization_means and normalization_deviations, as the uform package's ImageProcessor "
                        "for this model makes them; pass the images themselves"
                        + (f" (or float32 pixels: {coarse} may round them by more than the 0.01 of a level allowed)"
                           if coarse else ""))
        return _np.ascontiguousarray(nearest.astype(_np.uint8).transpose(0, 2, 3, 1))

    __call__ = encode
    forward = encode


#: Files whose presence means a tower is there: UForm3's per-tower files, and the single
#: ``model.safetensors`` of a sentence-transformers / Hugging Face BERT directory (text only).
_TOWER_FILES = {Modality.TEXT_ENCODER: (b"text_encoder.safetensors", b"model.safetensors"),
                Modality.IMAGE_ENCODER: (b"image_encoder.safetensors",)}


def _present(directory: bytes) -> list:
    """The modalities whose weights ``directory`` holds, or the text encoder when it holds none (so
    that opening it reports what is missing, as the engine names it)."""
    found = [m for m, names in _TOWER_FILES.items() if any(os.path.isfile(os.path.join(directory, n)) for n in names)]
    return found or [Modality.TEXT_ENCODER]


def _normalization(directory: bytes):
    """``config.json``'s ``image_encoder.normalization_means`` and ``normalization_deviations``, or
    None where it has no such lists of 3 numbers."""
    try:
        with open(os.path.join(directory, b"config.json"), "rb") as file:
            section = json.load(file)["image_encoder"]
        means, deviations = section["normalization_means"], section["normalization_deviations"]
        means, deviations = tuple(float(v) for v in means), tuple(float(v) for v in deviations)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return (means, deviations) if len(means) == len(deviations) == 3 else None


def _modalities(value) -> list:
    """``get_model``'s ``modalities`` (not None) as a list of distinct `Modality`: one modality (what
    `Model.open` takes: a member, a spelling or the code 0, 1) or an iterable of them; another value
    is `Error(INVALID_ARGUMENT)` naming ``modalities`` and what it accepts."""
    if isinstance(value, (str, enum.Enum)):
        value = [value]
    else:
        try:
            value = list(value)
        except TypeError:  # not iterable: one modality, e.g. the code 0
            value = [value]
    wanted = []
    for item in value:
        try:
            wanted.append(_modality(item))
        except Error as error:
            if error.kind != Status.INVALID_ARGUMENT:
                raise
            raise Error(Status.INVALID_ARGUMENT,
                        f"modalities: {item!r} is not a modality; expected Modality.TEXT_ENCODER or "
                        f"Modality.IMAGE_ENCODER, 'text_encoder' or 'image_encoder' ('text', 'image'), the code 0 "
                        f"or 1, or a sequence of them") from None
    return list(dict.fromkeys(wanted))


def get_model(model_name=None, *, modalities=None, device: str = "cpu", token=None, backend=None, library=None,
              threads: int = 0, weights_dtype=None, path=None):
    """UForm's entry point over the engine: ``(processors, models)``, dicts keyed by `Modality`
    (also found by the other spellings, "image_encoder" included), as the ``uform`` package's.

    ``model_name`` (or ``path``, its other name here; one of them, `TypeError` for both or neither)
    is a local model directory, a ``str``, ``bytes`` or ``os.PathLike`` (nothing is downloaded;
    ``token`` is accepted and ignored, and so is ``backend`` when it is None, "onnx" or "torch", the
    package's two: the engine is the backend; another is `ValueError`, as the package's).
    ``modalities`` is None for every tower the directory holds (``text_encoder.safetensors`` or a
    sentence-transformers ``model.safetensors``: the text encoder; ``image_encoder.safetensors``:
    the image encoder; a tower present but unreadable raises), or one modality or a sequence of
    them, each a `Modality`, the ``uform`` package's ``Modality`` member or a string
    ("text_encoder", "image_encoder", as the package spells them; "text", "image" too) or the code (0, 1), as
    `Model.open` takes one; another value is `Error(INVALID_ARGUMENT)` naming ``modalities``. The
    package's VIDEO_ENCODER and TEXT_DECODER are `Error(UNSUPPORTED)`: the engine has no such
    towers.

    ``device`` "cpu" runs each encoder on a RAM executor of ``threads`` (0: 7/8 of the cores);
    "cuda" (one free GPU; "gpu", the package's ONNX spelling, too) or "cuda:N" (GPU N) holds the
    towers in that GPU's memory and encodes on a VRAM executor there (tokenising and decoding images
    on its host threads); "cuda" on a machine without a usable GPU is UNSUPPORTED (the message says
    why). A failure closes what was opened."""
    from . import Error, Executor, Library, Residency, Status, VramOptions

    if (model_name is None) == (path is None):
        raise TypeError("get_model takes the model directory once, as model_name (the first argument) or as path")
    path = model_name if path is None else path
    if backend not in (None, "onnx", "torch"):
        raise ValueError(f"Unknown backend: {backend!r} (the engine is the backend; 'onnx' and 'torch' are accepted "
                         f"and ignored)")
    if device == "gpu":
        device = "cuda"
    if not isinstance(device, str) or not (device == "cpu" or re.fullmatch(r"cuda(:[0-9]+)?", device)):
        raise Error(Status.UNSUPPORTED, f"device {device!r}: expected 'cpu', 'cuda' or 'cuda:N'")
    directory = _model_path(path)
    if modalities is None:
        wanted = _present(directory)
    else:
        wanted = _modalities(modalities)
    library = library or Library()
    vram = None
    if device != "cpu":
        library.gpu_status()
        vram = VramOptions.on([int(device[5:])]) if device.startswith("cuda:") else VramOptions()
    processors, models = _ByModality(), _ByModality()
    opened = []
    try:
        for modality in wanted:
            if vram is not None:
                model = Model.open(library, path, modality, weights_dtype=weights_dtype, residency=Residency.VRAM,
                                   vram=vram)
                opened.append(model)
                executor = Executor.for_vram(library, vram)
            else:
                model = Model.open(library, path, modality, weights_dtype=weights_dtype)
                opened.append(model)
                executor = Executor.for_ram(library, threads=threads)
            opened.append(executor)
            if modality is Modality.TEXT_ENCODER:
                length, padding = _text_shape(directory, model)
                processors[modality] = TextProcessor(model, length, padding)
                models[modality] = TextEncoder(model, executor, length)
            else:
                processors[modality] = ImageProcessor(model)
                models[modality] = ImageEncoder(model, executor, _normalization(directory))
    except BaseException:
        for thing in reversed(opened):
            try:
                thing.close()
            except Error:  # pragma: no cover - nothing else uses them yet
                pass
        raise
    return processors, models
