"""Which images a cluster can run, and where each one is: the one resolution of ``--image``.

The renderer resolves a job's image with :func:`resolve`, the federation's
placement asks the same function which clusters can run it (a cluster that
cannot is skipped with the sentence), and ``slurmkit images`` lists
:func:`rows`.  Settings are a partition's ``containers`` (the site model's
``ContainerSettings``, its cluster's keys under its own), read by attribute:
this module imports nothing of the site.
"""

from typing import List, NamedTuple

from slurmkit.containers import grammar


class ImageRefusal(ValueError):
    """The image cannot run there (a sentence saying why and what to give instead)."""


def resolve(settings, image: str, cluster: str, partition: str) -> str:
    """Where the runtime of ``settings`` finds ``image`` on ``cluster``: a name the site defines for it,
    else the path or reference as given; :class:`ImageRefusal` where it cannot run there."""
    problem = grammar.image_problem(image)
    if problem:
        raise ImageRefusal(problem)
    if settings.runtime is None:
        raise ImageRefusal("partition %s of cluster %s runs no container images (its site config has no "
                           "containers.runtime)" % (partition, cluster))
    if image in settings.images:
        location = settings.images[image]
    elif grammar.looks_like_reference(image):
        location = image
    else:
        raise ImageRefusal("image %r is not defined on cluster %s%s; give its path or registry reference instead"
                           % (image, cluster, " (it has: %s)" % ", ".join(sorted(settings.images))
                              if settings.images else ""))
    if settings.runtime in grammar.PATH_ONLY and not grammar.is_path(location):
        raise ImageRefusal("runtime %s on cluster %s starts %s, named by its absolute path; %r is not one"
                           % (settings.runtime, cluster, grammar.IMAGE_FORMS[settings.runtime], location))
    return location


class ImageRow(NamedTuple):
    cluster: str
    partitions: tuple                    # the partitions that share these settings
    runtime: str
    image: str                           # the name the site gives it
    location: str

    def to_dict(self):
        return {"cluster": self.cluster, "partitions": list(self.partitions), "runtime": self.runtime,
                "image": self.image, "location": self.location}


def rows(clusters) -> List[ImageRow]:
    """Every named image of ``clusters`` (the site's Cluster records), one row per image and group of
    partitions that run it the same way; partitions without a runtime are left out."""
    out: List[ImageRow] = []
    for cluster in clusters:
        groups = {}
        for part in cluster.partitions.values():
            settings = part.containers
            if settings.runtime is None:
                continue
            for name, location in sorted(settings.images.items()):
                groups.setdefault((settings.runtime, name, location), []).append(part.name)
        for (runtime, name, location), parts in sorted(groups.items(), key=lambda item: (item[0][1], item[1])):
            out.append(ImageRow(cluster.name, tuple(sorted(parts)), runtime, name, location))
    return out


def runtimes_of(clusters) -> List[tuple]:
    """(cluster, partition, runtime) of every partition that runs images: what ``images`` says about
    clusters whose images are all given by path or reference."""
    return [(cluster.name, part.name, part.containers.runtime) for cluster in clusters
            for part in cluster.partitions.values() if part.containers.runtime]
