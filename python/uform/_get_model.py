"""`uform.get_model`: a model directory opened as the ``uform`` PyPI package's ``(processors,
models)``, dicts keyed by `Modality` holding the processors and encoders of ``_encoders.py`` (where
they differ from the package's is told there). Re-exported by `uform.models` and `uform`."""

from __future__ import annotations

import enum
import json
import os
import re

from ._codes import Status
from ._errors import Error
from ._encoders import ImageEncoder, ImageProcessor, TextEncoder, TextProcessor
from ._inputs import _model_path
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
                models[modality] = TextEncoder(model, executor, length, device)
            else:
                processors[modality] = ImageProcessor(model)
                models[modality] = ImageEncoder(model, executor, _normalization(directory), device)
    except BaseException:
        for thing in reversed(opened):
            try:
                thing.close()
            except Error:  # pragma: no cover - nothing else uses them yet
                pass
        raise
    return processors, models
