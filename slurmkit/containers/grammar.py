"""The values of container jobs as users and sites write them: runtimes, images, mounts.

One grammar for the site schema (``containers`` of a cluster or partition), the
command line (``--image``, ``--mount``) and the renderer.  Every value ends up as
an argument of a runtime's command line or an ``srun`` option, so what could be
read two ways is refused here with a sentence saying what to write instead:

- a mount is ``SRC[:DST[:ro|rw]]`` with absolute paths: a ``:`` inside a path
  would move the split (pyxis and Apptainer split on it), a ``,`` would start the
  next mount in pyxis's ``--container-mounts``, and a ``..`` could name a place
  other than the one it seems to;
- an image is a name the site defines, an absolute path, or a reference the
  runtime resolves (``docker://...``, ``nvcr.io#nvidia/pytorch:25.01-py3``); never
  empty, never starting with ``-`` (a runtime would read it as an option), never
  holding whitespace or a control character.

Values that pass are still passed to the runtime as single, shell-quoted words:
a ``$(...)`` in a path is a strange path, never a command.
"""

import posixpath
import re
from typing import NamedTuple, Optional

# Slurm's own --container (an OCI bundle, run by the cluster's oci.conf), then the
# runtimes that wrap the task's command or add srun options of their own (pyxis).
RUNTIMES = ("oci", "charliecloud", "pyxis", "apptainer", "podman-hpc")
# How each runtime names an image it can start.
IMAGE_FORMS = {
    "oci": "an OCI bundle directory (config.json and rootfs/)",
    "charliecloud": "an image directory or a SquashFS file",
    "pyxis": "a SquashFS file or a registry reference (nvcr.io#nvidia/pytorch:25.01-py3)",
    "apptainer": "a SIF file, a sandbox directory or a URI (docker://..., oras://...)",
    "podman-hpc": "a registry reference (docker.io/library/debian:12) or a local image name",
}
# The runtimes that can only start an image at a path on the node (no registry).
PATH_ONLY = ("oci", "charliecloud")

_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
_SPACE_RE = re.compile(r"\s")
MAX_IMAGE = 4096


class Mount(NamedTuple):
    """A directory or file of the node made visible in the image."""

    source: str                          # absolute path on the node
    target: str                          # absolute path in the image
    readonly: bool = False

    def spec(self) -> str:
        """The ``SRC[:DST][:ro]`` text (DST left out where it equals SRC)."""
        text = self.source if self.target == self.source else "%s:%s" % (self.source, self.target)
        return text + (":ro" if self.readonly else "")

    def full(self) -> str:
        """``SRC:DST[:ro]``, both paths written out, as pyxis and Apptainer read a mount."""
        return "%s:%s%s" % (self.source, self.target, ":ro" if self.readonly else "")


def _path_problem(path: str, what: str, text: str) -> Optional[str]:
    if not path:
        return "the %s of mount %r is empty" % (what, text)
    if not path.startswith("/"):
        return ("the %s %r of mount %r is not an absolute path (the same path must mean the same place on every "
                "node)" % (what, path, text))
    if ".." in path.split("/"):
        return "the %s %r of mount %r has a '..' component; write the directory it means" % (what, path, text)
    return None


def parse_mount(text: str) -> Mount:
    """``SRC[:DST[:ro|rw]]`` as a :class:`Mount`; ValueError with the sentence to show otherwise."""
    if not isinstance(text, str) or not text:
        raise ValueError("a mount is SRC[:DST[:ro]], e.g. /data or /data:/mnt/data:ro")
    if _CONTROL_RE.search(text):
        raise ValueError("mount %r contains a control character (such as a newline)" % text)
    if "," in text:
        raise ValueError("mount %r contains ',', which separates mounts for the runtimes: give each mount "
                         "on its own (--mount is repeatable)" % text)
    parts = text.split(":")
    if len(parts) > 3:
        raise ValueError("mount %r has more than SRC:DST:FLAGS; a ':' cannot be part of a path here" % text)
    readonly = False
    if len(parts) == 3 or (len(parts) == 2 and parts[1] in ("ro", "rw")):
        flags = parts.pop()
        if flags not in ("ro", "rw"):
            raise ValueError("mount %r: the flags after the second ':' must be ro or rw, not %r" % (text, flags))
        readonly = flags == "ro"
    source = parts[0]
    target = parts[1] if len(parts) > 1 else source
    for path, what in ((source, "source"), (target, "target")):
        problem = _path_problem(path, what, text)
        if problem:
            raise ValueError(problem)
    source, target = posixpath.normpath(source), posixpath.normpath(target)
    if target == "/":
        raise ValueError("mount %r would hide the whole image under the node's directory; mount it below /" % text)
    return Mount(source, target, readonly)


def image_problem(image) -> Optional[str]:
    """Why ``image`` cannot name an image (one sentence), or None."""
    if not isinstance(image, str) or not image:
        return "an image is a name the site defines, an absolute path or a registry reference; it is empty"
    if len(image) > MAX_IMAGE:
        return "image %r... is longer than %d characters" % (image[:40], MAX_IMAGE)
    if _CONTROL_RE.search(image):
        return "image %r contains a control character (such as a newline)" % image
    if _SPACE_RE.search(image):
        return "image %r contains whitespace, which no runtime's image reference holds" % image
    if image.startswith("-"):
        return "image %r starts with '-', which a runtime would read as one of its options" % image
    if image.startswith("/") and ".." in image.split("/"):
        return "image %r has a '..' component; write the path it means" % image
    return None


def is_path(image: str) -> bool:
    """Whether ``image`` names a file or directory on the node (rather than a registry reference)."""
    return image.startswith("/")


def looks_like_reference(image: str) -> bool:
    """Whether ``image``, not a name the site defines, can still be handed to a runtime: a path or a
    reference with a registry, a tag or a scheme (``debian:12``, ``docker://...``, ``nvcr.io#...``).
    A bare word is more likely a misspelt image name of the site's."""
    return is_path(image) or any(c in image for c in "/:#@")
