"""What `uform.get_model` (``_get_model.py``) returns, shaped like the ``uform`` PyPI package's
``(processors, models)``: `TextProcessor` and `TextEncoder`, `ImageProcessor` and `ImageEncoder`,
each over one `Model` and an `Executor`. Re-exported by `uform.models`.

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
  in a list under ``"images"``, each taken as the encoder will read it (a PIL image's pixels read
  then, as the package's processor reads them), so closing or changing one afterwards changes
  nothing.
- The encoders are not PyTorch modules: ``eval()`` returns the encoder, and ``to(device)`` returns
  it for the device `get_model` put it on and refuses any other (the engine does not move towers).
  One encoder may be called from several threads: the calls take turns on its executor.
- The encoders take this package's processor output, or the texts and images themselves; the image
  encoder also takes the ``uform`` package's preprocessed pixels (its ONNX processor's float array
  [images, 3, size, size], or its PyTorch processor's ``{"images": tensor}``), which it takes back
  to the 8-bit pixels they were made from. Token ids (the ``uform`` package's text processor
  output) are refused: the engine takes texts, not ids.
- Embeddings are NumPy float32 arrays [items, dimensions] (lists of lists without NumPy), never
  PyTorch tensors: this package does not depend on PyTorch.
"""

from __future__ import annotations

import os
import threading
from typing import Optional

from ._codes import Residency, Status
from ._errors import Error
from ._inputs import _BYTES_LIKE, _image_list, _image_snapshot, _is_pil, _np, _resized_here, _text_list
from .models import Model


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


class _Encoder:
    """What both encoders share: a `Model` and the `Executor` it encodes on, taken by one call at a
    time, and the ``torch.nn.Module`` calls that code written for the package makes on them."""

    def __init__(self, model: Model, executor, device: Optional[str] = None):
        """Encodes with ``model`` on ``executor`` (an `Executor`, or None to run inline); ``device`` is
        where `get_model` put it (None: "cuda" for a VRAM-resident model, else "cpu")."""
        self.model = model
        self.executor = executor
        self.return_features = False
        if device is None:
            device = "cuda" if model.describe().residency == Residency.VRAM else "cpu"
        self._device = device
        # An executor takes one call at a time (a second one is CONTENDED): callers on other threads
        # wait here for their turn instead, as they may call the package's encoders at once.
        self._turn, self._pid = threading.Lock(), os.getpid()

    def _run(self, encode, *arguments, **options):
        """``encode(self.executor, *arguments, **options)`` once no other thread is encoding with it.
        In a forked child it calls at once, for the engine to refuse the parent's executor (FORKED),
        never waiting on a turn a parent's thread held at the fork; inline (no executor), callers never
        contend, so none waits."""
        if self.executor is None or os.getpid() != self._pid:
            return encode(self.executor, *arguments, **options)
        with self._turn:
            return encode(self.executor, *arguments, **options)

    training = False  # ``torch.nn.Module.training`` after ``eval()``: always in inference mode

    def eval(self):
        """Returns this encoder, as ``torch.nn.Module.eval`` does: it is always in inference mode."""
        return self

    def to(self, device):
        """Returns this encoder where ``device`` (a string or a ``torch.device``, compared by its
        ``str``) is the one it runs on, `get_model`'s ``device``; another is `Error(UNSUPPORTED)`: the
        engine does not move a tower, `get_model` opens it where its ``device`` argument says."""
        if str(device) == self._device:
            return self
        raise Error(Status.UNSUPPORTED,
                    f"to({str(device)!r}): this encoder runs on {self._device!r} and cannot move; pass the device "
                    f"to get_model (its device argument: 'cpu', 'cuda' or 'cuda:N') to encode there")


class TextEncoder(_Encoder):
    """What ``models[Modality.TEXT_ENCODER]`` is: ``encode(x)`` returns the embeddings [texts,
    dimensions], and ``encode(x, return_features=True)`` ``(features, embeddings)``, features
    [texts, length, hidden] (the rows `TextProcessor` pads to), as the ``uform`` package's encoder
    does. ``return_features`` is False, as the package's PyTorch encoder's; set True, it is
    ``encode``'s default. Threads may call it at once; they take turns on its executor."""

    def __init__(self, model: Model, executor, length: Optional[int] = None, device: Optional[str] = None):
        """Encodes with ``model`` on ``executor`` (an `Executor`, or None to run inline); features
        get ``length`` rows (None: the model's context); ``device`` as `_Encoder`'s."""
        super().__init__(model, executor, device)
        self._length = length
        #: The embedding width, as the package's encoders name it.
        self.embedding_dim = model.describe().dimensions

    def encode(self, x, attention_mask=None, return_features: Optional[bool] = None):
        """The embeddings [texts, dimensions] (float32 NumPy, or lists without NumPy) of ``x``: what
        `TextProcessor` returned (its ``"texts"`` are encoded), one text (a ``str`` or bytes-like),
        or a sequence of texts (a list, a tuple, a NumPy array of strings). ``attention_mask`` is
        accepted for the package's signature and unused; with a processor's dict it must be None,
        as the package asserts (the dict carries its own), else `Error(INVALID_ARGUMENT)`.

        With ``return_features=True`` (or the attribute set), ``(features, embeddings)``: features
        float32 [texts, length, hidden], each text's last hidden states in token order (specials
        included), then zero rows (as many rows as `TextProcessor`'s mask has columns).

        Refuses, with `Error(UNSUPPORTED)`, token ids (the ``uform`` package's processor output, an
        integer array or tensor, lists of ints): the engine tokenizes texts itself and takes no ids."""
        from . import Error, Status

        if isinstance(x, dict):
            if attention_mask is not None:
                raise Error(Status.INVALID_ARGUMENT,
                            "encode got a processor's dict and an attention_mask; the dict carries its own: pass "
                            "attention_mask=None (the uform package asserts \"If `x` is a dictionary, then "
                            "`attention_mask` should be None\")")
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
            return self._run(self.model.encode_texts, texts)
        return self._run(self.model.encode_texts, texts, features=True, feature_rows=self._length or 0)

    __call__ = encode
    forward = encode


class ImageProcessor:
    """What ``processors[Modality.IMAGE_ENCODER]`` is: ``processor(images)`` returns
    ``{"images": [...]}``, a list (one image becomes a list of one; a NumPy batch [images, height,
    width, 3] a list of its images), which `ImageEncoder.encode` accepts. Each image is encoded JPEG
    or PNG bytes, a file path, a NumPy array [height, width, 3] of uint8 RGB, or a PIL image.

    Each is taken now as the encoder will read it, as the package's processor takes the pixels when
    called, so that closing or changing it afterwards changes nothing: a PIL image's pixels are read
    (RGB as a NumPy array, modes PNG holds as uncompressed PNG bytes, other modes resized and made
    RGB as `Model.encode_images` says), a NumPy image is copied, a ``bytearray`` or ``memoryview``
    becomes ``bytes``; bytes and paths stay as they are (a path is read when encoded).

    Unlike the ``uform`` package's processor it does not crop or normalise, so it returns no pixel
    tensor: the engine decodes and preprocesses (as the package's processor does, with PIL's bicubic
    filter) in C on the encoder's threads."""

    def __init__(self, model: Model):
        """Gathers images for ``model``'s encoder."""
        self._model = model

    def __call__(self, images) -> dict:
        """``{"images": [...]}`` for one image or a sequence of them; an image C cannot take (a PIL or
        NumPy image of zero width, a NumPy array not [height, width, 3] uint8) raises as
        `Model.encode_images` would."""
        images = _image_list(images)
        size = self._model.describe().image_size if any(_resized_here(image) for image in images) else 0
        return {"images": [_image_snapshot(image, index, size) for index, image in enumerate(images)]}


class ImageEncoder(_Encoder):
    """What ``models[Modality.IMAGE_ENCODER]`` is: ``encode(x)`` returns the embeddings [images,
    dimensions], and ``encode(x, return_features=True)`` ``(features, embeddings)``, features
    [images, tokens, hidden], as the ``uform`` package's encoder does. ``normalization`` is the
    model's ``(normalization_means, normalization_deviations)``, which `get_model` reads from
    ``config.json``; with it the encoder also takes the ``uform`` package's preprocessed pixels.
    ``return_features`` is False; set True, it is ``encode``'s default. Threads may call it at once;
    they take turns on its executor."""

    def __init__(self, model: Model, executor, normalization=None, device: Optional[str] = None):
        """Encodes with ``model`` on ``executor`` (an `Executor`, or None to run inline); ``device``
        as `_Encoder`'s."""
        super().__init__(model, executor, device)
        self.normalization = normalization
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
        return self._run(self.model.encode_images, self._pixels(images),
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
