"""What `uform.get_model` returns, shaped like the ``uform`` PyPI package's ``(processors,
models)``: `TextProcessor` and `TextEncoder`, `ImageProcessor` and `ImageEncoder`, each over one
`Model` and an `Executor`. Re-exported by `uform.models` (and `get_model` by `uform`)."""

from __future__ import annotations

from typing import Optional

from ._inputs import _image_list, _np, _text_list
from .models import Model, Modality, _modality


class TextProcessor:
    """What ``processors[Modality.TEXT_ENCODER]`` is: texts to the model's ids, as the ``uform``
    package's processor, returning ``{"input_ids", "attention_mask"}`` (NumPy arrays when importable,
    padded with zeros) that `TextEncoder.encode` accepts; the texts travel along under ``"texts"``."""

    def __init__(self, model: Model):
        """Tokenizes with ``model``'s tokenizer."""
        self._model = model

    def __call__(self, texts):
        """``{"input_ids", "attention_mask", "texts"}`` for one text (a ``str`` or bytes-like) or a
        sequence of them."""
        texts = _text_list(texts)
        ids = [self._model.tokenize(t) for t in texts]
        width = max((len(i) for i in ids), default=0)
        padded = [i + [0] * (width - len(i)) for i in ids]
        mask = [[1] * len(i) + [0] * (width - len(i)) for i in ids]
        if _np is not None:
            padded, mask = _np.array(padded, dtype=_np.int64).reshape(len(ids), width), _np.array(mask, dtype=_np.int64).reshape(len(ids), width)
        return {"input_ids": padded, "attention_mask": mask, "texts": texts}


class TextEncoder:
    """What ``models[Modality.TEXT_ENCODER]`` is: ``encode(processed)`` returns the embeddings
    [texts, dimensions], as the ``uform`` package's encoder does (``return_features`` is UNSUPPORTED:
    the engine keeps no hidden states)."""

    def __init__(self, model: Model, executor):
        """Encodes with ``model`` on ``executor`` (an `Executor`, or None to run inline)."""
        self.model = model
        self.executor = executor

    def encode(self, x, attention_mask=None, return_features: Optional[bool] = None):
        """The embeddings [texts, dimensions] of what `TextProcessor` returned, or of texts;
        ``attention_mask`` is accepted for the package's signature and unused (the engine
        tokenizes itself); ``return_features=True`` raises `Error(UNSUPPORTED)`."""
        from . import Error, Status

        if return_features:
            raise Error(Status.UNSUPPORTED, "return_features: the engine returns embeddings only")
        if isinstance(x, dict):
            if "texts" not in x:
                raise Error(Status.INVALID_ARGUMENT, "encode takes what uform's text processor returned, or texts")
            texts = x["texts"]
        else:
            texts = x
        return self.model.encode_texts(self.executor, texts)

    __call__ = encode
    forward = encode


class ImageProcessor:
    """What ``processors[Modality.IMAGE_ENCODER]`` is. The engine decodes and preprocesses in C on
    the encoder's threads, so this only gathers the images (bytes, paths, NumPy arrays, PIL images)
    into ``{"images": [...]}``, which `ImageEncoder.encode` accepts, as the ``uform`` package's
    processor output is what its encoder accepts."""

    def __init__(self, model: Model):
        """Gathers images for ``model``'s encoder."""
        self._model = model

    def __call__(self, images):
        """``{"images": [...]}`` for one image or a sequence of them."""
        return {"images": _image_list(images)}


class ImageEncoder:
    """What ``models[Modality.IMAGE_ENCODER]`` is: ``encode(processed)`` returns the embeddings
    [images, dimensions] (``return_features`` is UNSUPPORTED)."""

    def __init__(self, model: Model, executor):
        """Encodes with ``model`` on ``executor`` (an `Executor`, or None to run inline)."""
        self.model = model
        self.executor = executor

    def encode(self, x, return_features: Optional[bool] = None):
        """The embeddings [images, dimensions] of what `ImageProcessor` returned, or of images;
        ``return_features=True`` raises `Error(UNSUPPORTED)`."""
        from . import Error, Status

        if return_features:
            raise Error(Status.UNSUPPORTED, "return_features: the engine returns embeddings only")
        images = x["images"] if isinstance(x, dict) else x
        return self.model.encode_images(self.executor, images)

    __call__ = encode
    forward = encode


def get_model(path, *, modalities=None, device: str = "cpu", token=None, backend=None, library=None,
              threads: int = 0, weights_dtype=None):
    """UForm's entry point over the engine: ``(processors, models)``, dicts keyed by `Modality`.
    ``path`` is a local model directory, a ``str`` or ``os.PathLike`` (nothing is downloaded;
    ``token`` is accepted and ignored); ``modalities`` is one `Modality` (or its name), a sequence
    of them, or None for the text encoder. ``device`` "cpu" runs the encoders on a RAM executor of
    ``threads`` (0: 7/8 of the cores); "cuda" (one free GPU) or "cuda:N" (GPU N) holds the towers
    in that GPU's memory and encodes on a VRAM executor there (tokenising and decoding images on its
    host threads); "cuda" on a machine without a usable GPU is UNSUPPORTED (the message says why)."""
    from . import Error, Executor, Library, Residency, Status, VramOptions

    if not isinstance(device, str) or not (device == "cpu" or device == "cuda" or
                                           (device.startswith("cuda:") and device[5:].isdigit())):
        raise Error(Status.UNSUPPORTED, f"device {device!r}: expected 'cpu', 'cuda' or 'cuda:N'")
    library = library or Library()
    if modalities is None:
        modalities = [Modality.TEXT_ENCODER]
    elif isinstance(modalities, (str, Modality)):
        modalities = [modalities]
    wanted = [_modality(m) for m in modalities]
    vram = None
    if device != "cpu":
        library.gpu_status()
        vram = VramOptions.on([int(device[5:])]) if device.startswith("cuda:") else VramOptions()
    processors, models = {}, {}
    for modality in wanted:
        if vram is not None:
            model = Model.open(library, path, modality, weights_dtype=weights_dtype, residency=Residency.VRAM, vram=vram)
            executor = Executor.for_vram(library, vram)
        else:
            model = Model.open(library, path, modality, weights_dtype=weights_dtype)
            executor = Executor.for_ram(library, threads=threads)
        if modality is Modality.TEXT_ENCODER:
            processors[modality], models[modality] = TextProcessor(model), TextEncoder(model, executor)
        else:
            processors[modality], models[modality] = ImageProcessor(model), ImageEncoder(model, executor)
    return processors, models
