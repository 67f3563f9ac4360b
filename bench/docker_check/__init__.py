"""``make docker-check``: build the CPU image for real, run it with docker compose, check it end to end, and write
``bench/results/docker.{md,json}``.

The Dockerfiles and compose files are linted and validated by ``tests/test_ops_configs.py``, but only a build and a
run show that ``docker compose up`` works. This check does both on a machine with no container registry: every image
it needs is made from Debian packages, and every Python package comes from a wheelhouse built on the host.

Steps, each skipped when already done (so a second run only rebuilds what changed):

1. tools: ``docker.io`` and ``debootstrap`` from apt when missing (as root);
2. Docker engine: ``dockerd`` started when none answers, with no bridge network and no iptables rules, so that no
   container gets a private-range address; every build and container uses the host's network and 127.0.0.1;
3. base image: the image ``docker/Dockerfile`` names (``debian:bookworm-slim``) made with ``debootstrap
   --variant=minbase`` and ``docker import``, trimmed like Debian's official slim images, when it is absent (a
   pulled one is used as it is);
4. wheelhouse: ``.cache/wheelhouse``, wheels of torch (CPU build), the dependencies in ``pyproject.toml`` and the
   build backend, made by ``pip wheel`` on the host (whose Python must be the image's: Debian bookworm's 3.11), and
   served during the build as a PyPI-like index on 127.0.0.1, given as the Dockerfile's ``TORCH_INDEX`` and
   ``PIP_INDEX_URL``: the Dockerfile users build is the one built here;
5. build: ``overtime:cpu`` from ``docker/Dockerfile``, and Debian's Prometheus from
   ``docker/prometheus/Dockerfile.debian``;
6. run: ``docker compose -p overtime-check -f docker-compose.yml -f docker-compose.check.yml up -d overtime
   prometheus``;
7. checks: the image holds Debian's Python, a CPU torch and every tracked file of the packages; HEALTHCHECK healthy;
   every process non-root; the demo stream learns over the WebSocket (its loss over the last loop of the clip below
   that over the first); Prometheus scrapes ``/metrics`` with the repository's scrape config and rules; ``docker
   stop`` writes the final checkpoint into the volume; a new container resumes from it;
8. cleanup: ``compose down -v`` (the project's containers and volumes); images stay, as the build cache.

Any failed check ends the run with a message saying which, the service's log tail, and exit status 1.

Modules, one step each: ``shell`` (commands, logging, failures), ``repository`` (paths, names, Dockerfile facts),
``engine`` (1-2), ``base_image`` (3), ``wheelhouse`` (4), ``build`` (5), ``stack`` (6: the compose project),
``checks`` (7), ``report`` (the results), ``__main__`` (the command line, and 8).
"""
