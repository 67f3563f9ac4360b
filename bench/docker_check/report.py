"""The results page ``bench/results/docker.md``: what each check measured, and what the check cannot run here and
why."""

from __future__ import annotations

import re
from pathlib import Path

from bench.docker_check.checks import NOT_WRECKED
from bench.docker_check.repository import CUDA_DOCKERFILE, IMAGE, dockerfile_facts


def not_run(compose_file: Path) -> dict:
    """What the check cannot exercise here, and why (said in the results, not skipped silently)."""
    text = compose_file.read_text()
    grafana = re.search(r"image:\s*(grafana/\S+)", text)[1]
    prometheus = re.search(r"image:\s*(prom/\S+)", text)[1]
    cuda = dockerfile_facts(CUDA_DOCKERFILE)["FROM"]
    return {
        "grafana": f"{grafana}: not run. The check pulls no image and none can be pulled where it was written (no "
        "container registry reachable), and Grafana is not a Debian package; its provisioning and dashboards are "
        "checked by tests/test_ops_configs.py and test_ops_live.py",
        "prometheus_image": f"{prometheus}: not run, for the same reason; Debian's Prometheus runs in its place "
        "with the compose service's command, config and rule mounts and volume",
        "cuda_image": f"docker/Dockerfile.cuda: not built. Its base {cuda} cannot be made like debian:bookworm-slim: "
        "it is Ubuntu plus NVIDIA's CUDA packages from NVIDIA's apt repository, which Debian does not ship (and it "
        "would need a GPU and the NVIDIA Container Toolkit to run)",
    }


def report(result: dict) -> str:
    """The markdown of the results page, from the dict ``main`` collects (also written as docker.json)."""
    r = result
    b, i, h, n, s, lr = r["build"], r["image"], r["health"], r["non_root"], r["scrape"], r["learn"]
    st, nw, rs, base, wh, eng = r["stop"], r["not_wrecked"], r["resume"], r["base"], r["wheelhouse"], r["engine"]
    made = f"made now ({base['seconds']} s)" if base["made_now"] else "reused"
    dockerd = "started by the check" if eng["started_by_check"] else "already running"
    rows = [
        ("build time", f"**{b['seconds']} s** for docker/Dockerfile ({b['cached_steps']} of {b['steps']} steps from "
         f"the layer cache{', --no-cache' if r['args']['no_cache'] else ''})"),
        ("image size", f"**{i['size_mb']} MB** ({IMAGE}: Debian's Python {i['python']}, torch {i['torch']}; all "
         f"{i['package_files']} files git tracks in {', '.join(i['packages'])} are in /app)"),
        ("healthy after", f"**{h['healthy_after_s']} s** from the container's start: the first HEALTHCHECK probe "
         f"that passed ({h['failed_probes_before']} failed before; they run every 15 s, the first at 15 s); the API "
         f"listed the demo stream {h['api_after_s']} s after the start"),
        ("non-root", f"uid {', '.join(n['uids'])} for all {n['processes']} processes (docker top); docker exec: uid "
         f"{n['exec_uid']}; image USER {i['user']}"),
        ("frames learned", f"**{lr['frames']}** demo frames over /ws/streams/{{id}} in {lr['seconds']:g} s "
         f"(learning at {', '.join(f'{w}×{h}' for w, h in lr['learning_sizes'])}, as the frame budget moved it); "
         f"median loss relative to zero flow's on the same pairs over the first → last loop of the "
         f"{lr['loop_s']:g} s demo clip ({lr['first_loop_frames']} → {lr['last_loop_frames']} frames): "
         f"{lr['first_loop_relative']} → {lr['last_loop_relative']}: it beats zero flow (below 1). The two loops are "
         f"not compared: the learning size differs between them, and so does the loss (next row)"),
        ("scrape ok", f"**yes**: Debian's Prometheus {s['prometheus']}, repository's scrape config and rules; target "
         f"{s['scrape_url']} up, {s['overtime_series']} overtime_* series, {s['rules']} alert rules evaluated"
         f"{', not ok: ' + ', '.join(s['rules_not_ok']) if s['rules_not_ok'] else ' ok'}"),
        ("docker stop", f"exit {st['exit_code']} after {st['seconds']} s; final checkpoint {st['file']} in volume "
         f"{st['volume']}: {st['checkpoint_frames']} frames, written {st['written_s_into_stop']} s into the stop; "
         f"its weights lie {st['moved_from_shipped']} (Euclidean) from the shipped ones the demo started from"),
        ("not wrecked", f"**yes**: the demo starts from the shipped pretrained weights; on the demo clip "
         f"({nw['pairs']} pairs at {nw['size'][0]}×{nw['size'][1]}, run here) the stopped checkpoint's weights score "
         f"{nw['learned_relative']} of zero flow's loss (median), the shipped ones {nw['shipped_relative']}: "
         f"at most {round(100 * (NOT_WRECKED - 1))} % worse is allowed"),
        ("resume ok", f"**yes**: a new container on the same volume, resumed_from = {rs['resumed_from']} (the "
         f"checkpoint); median loss relative to zero flow's over its first loop {rs['first_loop_relative']} "
         f"({rs['first_loop_frames']} frames); stopped in turn after {rs['frames_after']} frames, its "
         f"weights lie {rs['from_checkpoint']} from the first checkpoint's and {rs['from_shipped']} from the shipped "
         f"start: the checkpoint's weights came back"),
        ("total", f"{r['total_s']} s for the whole check"),
    ]  # fmt: skip
    table = "\n".join(f"| {k} | {v} |" for k, v in rows)
    missing = "\n".join(f"- {v}" for v in r["not_run"].values())
    return (
        f"Docker Engine {eng['server_version']} (dockerd {dockerd}; bridge networks: "
        f"{', '.join(eng['bridge_networks']) or 'none'}), Compose {r['compose']}. Base {base['image']}: {made}, "
        f"{base['origin']}. Wheelhouse: {wh['wheels']} wheels, {wh['mb']} MB "
        f"({'made now' if wh['made_now'] else 'reused'}), "
        f"served on 127.0.0.1 as TORCH_INDEX and PIP_INDEX_URL. Builds and containers on the host network, all traffic "
        f"to 127.0.0.1 (service :{r['ports']['overtime']}, Prometheus :{r['ports']['prometheus']}).\n\n"
        f"| check | result |\n|---|---|\n{table}\n\nNot run here:\n\n{missing}"
    )  # fmt: skip
