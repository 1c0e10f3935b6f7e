"""The engines' exports (hpcwizard.render): a Slurm batch script, and Kubernetes jobs for the
Kubeflow MPI Operator (MPIJob), Kubeflow's PyTorchJob and TrainJob, and Volcano.

What each export holds, and each whole in golden files, is a table of cases
(tests/fixtures/render-cases.toml, run by test_render_cases.py). Here: every manifest parses
back to the data it was written from and validates against its operator's published CRD
schema (tests/fixtures/crds, with their sources), closed to unknown fields as strict field
validation is; every embedded script passes shellcheck and, run with stand-in
mpirun/srun/scontrol, starts the job with the plan's port in the names of the Open MPI that
runs."""
from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from hpcwizard import vocab
from hpcwizard.catalog import load_catalog
from hpcwizard.choices import make_choices
from hpcwizard.render import yamltext
from hpcwizard.render.mpijob import mpijob_doc
from hpcwizard.render.pytorchjob import pytorchjob_doc, trainjob_doc
from hpcwizard.render.volcano import volcano_doc
from hpcwizard.export import export_formats, render_export
from hpcwizard.plan import build_plan
from hpcwizard.session import write_export

from _core_fixtures import shellcheck
from _ib_fixtures import H100, PRIVILEGES, make_facts

yaml = pytest.importorskip("yaml", reason="PyYAML (a test dependency) reads the manifests back")
jsonschema = pytest.importorskip("jsonschema", reason="jsonschema (a test dependency) checks "
                                 "the manifests against the CRD schemas")

HERE = Path(__file__).parent
CRDS = HERE / "fixtures" / "crds"
CATALOG = load_catalog()

KUBE = {"mpijob": ("kubeflow.org_mpijobs.v2beta1.json", mpijob_doc),
        "pytorchjob": ("kubeflow.org_pytorchjobs.v1.json", pytorchjob_doc),
        "trainjob": ("trainer.kubeflow.org_trainjobs.v1alpha1.json", trainjob_doc),
        "volcano": ("batch.volcano.sh_jobs.v1alpha1.json", volcano_doc)}
FOR = {"mpi": ("sbatch", "mpijob", "volcano"), "pytorch": ("sbatch", "pytorchjob", "trainjob",
                                                          "volcano")}


def plan_of(fw: str, net: str, priv: str = "root", **choices):
    facts = make_facts("debian12", PRIVILEGES[priv], ib=True,
                       gpus=H100 if fw == "pytorch" else ())
    return build_plan(facts, make_choices(framework=fw, network=net, **choices), CATALOG)


PLANS = {f"{fw}-{net}": (fw, net, "root") for fw in ("mpi", "pytorch") for net in ("tcp", "ib")}
PLANS["mpi-tcp-user"] = ("mpi", "tcp", "sudo")  # a job user who is not root: alice, uid 1000
CASES = [(name, fmt) for name, (fw, _n, _p) in PLANS.items() for fmt in FOR[fw]]


def plain(data):
    """The data a manifest was written from, without its comments (yamltext.Note)."""
    if isinstance(data, yamltext.Note):
        return plain(data.value)
    if isinstance(data, dict):
        return {k: plain(v) for k, v in data.items()}
    if isinstance(data, list):
        return [plain(v) for v in data]
    return data


def crd(fmt: str) -> dict:
    return json.loads((CRDS / KUBE[fmt][0]).read_text())


def strict(schema):
    """The schema closed to unknown fields where it lists properties and does not keep
    unknown ones, as the API server's strict field validation is."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: (v if k == "enum" else {n: strict(s) for n, s in v.items()} if k == "properties"
               else strict(v)) for k, v in schema.items()}
    if ("properties" in schema and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


def manifest(name: str, fmt: str):
    plan = plan_of(*PLANS[name])
    text = render_export(plan, fmt)
    return plan, text, yaml.safe_load(text)


# --- the text ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["mpi-tcp", "pytorch-ib"])
def test_sbatch_edit_note_names_only_lines_that_are_there(name):
    """'Edit: ... below' names #SBATCH lines the file has."""
    text = render_export(plan_of(*PLANS[name]), "sbatch")
    lines = text.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("# Edit: --nodes"))
    note = " ".join(l[2:] for l in lines[start:start + 3])
    below = note.split(" below", 1)[0]
    opts = re.findall(r"--[a-z][a-z-]*", below)
    assert opts
    for opt in opts:
        assert f"#SBATCH {opt}=" in text, opt


def test_the_torch_check_note_fits_every_network():
    for net in ("tcp", "ib"):
        step = next(s for s in plan_of("pytorch", net).steps if s.id == "pytorch/torch-check")
        assert "TCP" not in step.note and "TCP" not in step.i18n["zh"]["note"], net


def test_the_same_plan_gives_the_same_text():
    for name, fmt in CASES:
        assert render_export(plan_of(*PLANS[name]), fmt) == render_export(plan_of(*PLANS[name]), fmt)


# --- the manifests against the operators' schemas --------------------------------------------

KUBE_CASES = [(n, f) for n, f in CASES if f in KUBE]


@pytest.mark.parametrize("name,fmt", KUBE_CASES, ids=[f"{n}-{f}" for n, f in KUBE_CASES])
def test_manifest_reads_back_as_its_data_and_validates_against_the_crd(name, fmt):
    plan, text, data = manifest(name, fmt)
    assert data == plain(KUBE[fmt][1](plan.job))  # the emitter wrote what it was given
    schema = crd(fmt)
    assert data["apiVersion"] == f"{schema['group']}/{schema['version']}"
    assert data["kind"] == schema["kind"]
    jsonschema.validate(data, strict(schema["openAPIV3Schema"]))


def test_the_strict_schema_refuses_a_misspelt_field():
    """The check can fail: a field the CRD does not have, or a wrong type, is an error."""
    _plan, _text, data = manifest("mpi-ib", "mpijob")
    schema = strict(crd("mpijob")["openAPIV3Schema"])
    data["spec"]["slotPerWorker"] = 1
    with pytest.raises(jsonschema.ValidationError, match="slotPerWorker"):
        jsonschema.validate(data, schema)
    del data["spec"]["slotPerWorker"]
    data["spec"]["slotsPerWorker"] = "one"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, schema)


def _containers(spec: dict):
    return spec["template"]["spec"]["containers"]


def test_the_cli_and_the_wizard_list_the_registry():
    from hpcwizard.cli import build_parser
    from screens.widgets import DEFAULT_PATHS, FORMAT_LABELS, WROTE

    names = tuple(export_formats())
    assert names == vocab.INSTANCE_EXPORTS + vocab.ENGINE_EXPORTS == vocab.EXPORT_FORMATS
    export = next(a for a in build_parser()._subparsers._group_actions[0].choices["export"]._actions
                  if a.dest == "format")
    assert tuple(export.choices) == names
    for table in (FORMAT_LABELS, DEFAULT_PATHS, WROTE):
        assert set(table) == set(names)


def test_written_files_modes(tmp_path):
    plan = plan_of("mpi", "tcp")
    (sbatch,) = write_export(plan, "sbatch", tmp_path / "job.sbatch")
    (yml,) = write_export(plan, "mpijob", tmp_path / "job.yaml")
    assert sbatch.stat().st_mode & 0o777 == 0o755 and yml.stat().st_mode & 0o777 == 0o644


def test_cli_export_wrong_framework_is_one_line_and_status_2(tmp_path):
    proc = subprocess.run(["python3", "-m", "hpcwizard", "export", "--framework", "pytorch",
                           "--network", "tcp", "--format", "mpijob", "-o", str(tmp_path / "x")],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "Traceback" not in proc.stderr and not (tmp_path / "x").exists()


# --- the YAML writer -------------------------------------------------------------------------

@pytest.mark.parametrize("value", [
    "yes", "no", "on", "null", "~", "1", "1.5", "0x1f", "a: b", "- x", "#x", " lead", "trail ",
    "tab\there", "é", "", "multi\nline\n", "multi\nline", "two\n\nblank\n", " lead\nline\n",
    "end\n\n", "a\r\nb", "x'y\"z", "$(id)", "*star", "&anchor", "!tag", "@at", "`tick`", "%p",
    "{a}", "[a]", "a,b", "true", "False", "0o17", ".inf", "=", "<<",
])
def test_yaml_writer_reads_back_exactly(value):
    data = {"k": value, "list": [value, {"inner": value}], value or "empty": 1}
    assert yaml.safe_load(yamltext.dump(data)) == data


def test_yaml_writer_notes_are_comments():
    text = yamltext.dump({"a": yamltext.Note(1, "say\nmore"), "b": [yamltext.Note({"c": 2}, "x")]},
                         header="top")
    assert text.splitlines()[:3] == ["# top", "# say", "# more"]
    assert yaml.safe_load(text) == {"a": 1, "b": [{"c": 2}]}


# --- the scripts, run --------------------------------------------------------------------------

def _scripts():
    out = []
    for name, fmt in CASES:
        plan = plan_of(*PLANS[name])
        text = render_export(plan, fmt)
        if fmt == "sbatch":
            out.append((f"{name}-sbatch", text))
            continue
        for k, script in enumerate(_bash_c(yaml.safe_load(text))):
            out.append((f"{name}-{fmt}-{k}", "#!/usr/bin/env bash\n" + script))
    return out


def _bash_c(node):
    if isinstance(node, dict):
        cmd = node.get("command")
        if isinstance(cmd, list) and cmd[:2] == ["/bin/bash", "-c"]:
            yield cmd[2]
        for v in node.values():
            yield from _bash_c(v)
    elif isinstance(node, list):
        for v in node:
            yield from _bash_c(v)


def test_every_script_passes_shellcheck(tmp_path):
    scripts = _scripts()
    assert len(scripts) > len(CASES)  # the sbatch files and the pods' scripts
    for name, text in scripts:
        proc = shellcheck(text, tmp_path, f"{name}.sh")
        assert proc.returncode == 0, f"{name}:\n{proc.stdout}"


FAKE_MPIRUN = """#!/bin/bash
if [ "$1" = --version ]; then echo "mpirun (Open MPI) $FAKE_OMPI"; exit 0; fi
printf '%s\\n' "$@" > "$FAKE_OUT/mpirun.args"
for a in "$@"; do case "$prev" in --hostfile) cp "$a" "$FAKE_OUT/hostfile" ;; esac; prev=$a; done
"""
FAKE_SRUN = """#!/bin/bash
if [ "$1" = --mpi=list ]; then printf 'MPI plugin types are...\\n\\tnone\\n\\tpmi2\\n%s' "$FAKE_PMIX" >&2; exit 0; fi
printf '%s\\n' "$@" > "$FAKE_OUT/srun.args"
"""
FAKE_SCONTROL = """#!/bin/bash
[ "$1 $2" = "show hostnames" ] && printf 'n1\\nn2\\nn3\\n'
"""


def _fake_bin(tmp_path: Path) -> Path:
    b = tmp_path / "bin"
    b.mkdir()
    for name, text in (("mpirun", FAKE_MPIRUN), ("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL)):
        (b / name).write_text(text)
        (b / name).chmod(0o755)
    return b


def _run(tmp_path, script: str, args, **env):
    path = tmp_path / "script.sh"
    path.write_text(script)
    fakes = tmp_path / "bin" if (tmp_path / "bin").exists() else _fake_bin(tmp_path)
    full = {**os.environ, "PATH": f"{fakes}:{os.environ['PATH']}",
            "FAKE_OUT": str(tmp_path), "SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[1-3]",
            "SLURM_JOB_NUM_NODES": "3", "SLURM_NTASKS_PER_NODE": "2", **env}
    return subprocess.run(["bash", str(path), *args], capture_output=True, text=True, env=full,
                          stdin=subprocess.DEVNULL)


def _args(tmp_path, tool):
    return (tmp_path / f"{tool}.args").read_text().splitlines()


@pytest.mark.parametrize("version,flag,name", [("4.1.4", "--mca", "plm_rsh_args"),
                                               ("5.0.7", "--prtemca", "plm_ssh_args")])
def test_mpijob_launcher_gives_the_port_in_the_names_of_the_open_mpi_that_runs(
        tmp_path, version, flag, name):
    plan, _text, data = manifest("mpi-ib", "mpijob")
    script = _containers(data["spec"]["mpiReplicaSpecs"]["Launcher"])[0]["command"][2]
    proc = _run(tmp_path, script, [], FAKE_OMPI=version)
    assert proc.returncode == 0, proc.stderr
    args = _args(tmp_path, "mpirun")
    i = args.index(name)
    assert args[i - 1] == flag and args[i + 1] == "-p 2222 -o ConnectionAttempts=10"
    assert args[-3:] == ["--hostfile", "/etc/mpi/hostfile", "hostname"]
    assert ["--mca", "pml", "ucx"] == args[args.index("pml") - 1:args.index("pml") + 2]


def test_sbatch_mpi_uses_srun_pmix_where_slurm_has_it(tmp_path):
    script = render_export(plan_of("mpi", "tcp"), "sbatch")
    proc = _run(tmp_path, script, ["./hello", "x"], FAKE_PMIX="\tpmix\n", FAKE_OMPI="4.1.4")
    assert proc.returncode == 0, proc.stderr
    assert _args(tmp_path, "srun") == ["--mpi=pmix", "./hello", "x"]
    assert not (tmp_path / "mpirun.args").exists()


def test_sbatch_mpi_reads_all_of_a_long_plugin_list(tmp_path):
    """srun --mpi=list goes on after the pmix line: a grep that stops reading at the match
    leaves srun a broken pipe, which pipefail took for "no PMIx"."""
    b = _fake_bin(tmp_path)
    (b / "srun").write_text(FAKE_SRUN.replace(
        '"$FAKE_PMIX" >&2; exit 0',
        '"$FAKE_PMIX" >&2; for i in $(seq 200000); do echo "\\tpmix_v$i"; done >&2; exit 0'))
    script = render_export(plan_of("mpi", "tcp"), "sbatch")
    proc = _run(tmp_path, script, ["./hello"], FAKE_PMIX="\tpmix\n", FAKE_OMPI="4.1.4")
    assert proc.returncode == 0, proc.stderr
    assert _args(tmp_path, "srun") == ["--mpi=pmix", "./hello"]
    assert not (tmp_path / "mpirun.args").exists()


@pytest.mark.parametrize("version,flag", [("4.1.4", "--mca"), ("5.0.7", "--prtemca")])
def test_sbatch_mpi_without_pmix_runs_mpirun_over_the_allocation(tmp_path, version, flag):
    script = render_export(plan_of("mpi", "tcp"), "sbatch")
    proc = _run(tmp_path, script, ["./hello"], FAKE_PMIX="", FAKE_OMPI=version)
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "srun.args").exists()
    args = _args(tmp_path, "mpirun")
    assert args[-1] == "./hello" and flag in args and "-p 2222 -o ConnectionAttempts=10" in args
    assert (tmp_path / "hostfile").read_text().splitlines() == [
        "n1 slots=2", "n2 slots=2", "n3 slots=2"]


def test_sbatch_mpi_launcher_chosen_by_hand_and_bad_input(tmp_path):
    script = render_export(plan_of("mpi", "tcp"), "sbatch")
    proc = _run(tmp_path, script, ["./hello"], FAKE_PMIX="\tpmix\n", FAKE_OMPI="4.1.4",
                MPI_LAUNCHER="mpirun")
    assert proc.returncode == 0 and (tmp_path / "mpirun.args").exists()
    bad = _run(tmp_path, script, ["./hello"], MPI_LAUNCHER="ssh")
    assert bad.returncode == 2 and "MPI_LAUNCHER=ssh" in bad.stderr
    none = _run(tmp_path, script, [])
    assert none.returncode == 2 and "usage" in none.stderr


def test_sbatch_pytorch_one_torchrun_a_node_with_the_rendezvous_from_slurm(tmp_path):
    plan = plan_of("pytorch", "ib")
    script = render_export(plan, "sbatch")
    for k, v in plan.launch_env:
        assert f"planned_env {k} '{v}'" in script
    proc = _run(tmp_path, script, ["python3", "train.py", "--lr", "0.1"], FAKE_PMIX="")
    assert proc.returncode == 0, proc.stderr
    assert _args(tmp_path, "srun") == [
        "--ntasks-per-node=1", "torchrun", "--nnodes=3", "--nproc-per-node=1", "--rdzv-id=7",
        "--rdzv-backend=c10d", "--rdzv-endpoint=n1:29500", "train.py", "--lr", "0.1"]
    _run(tmp_path, script, ["./bench"], FAKE_PMIX="")
    assert _args(tmp_path, "srun")[-2:] == ["--no-python", "./bench"]


@pytest.mark.parametrize("program,tail", [
    (["python", "-m", "mypkg.train", "--lr", "0.1"], ["-m", "mypkg.train", "--lr", "0.1"]),
    (["python3", "-u", "train.py"], ["train.py"]),
    (["./bench", "-m"], ["--no-python", "./bench", "-m"]),
])
def test_sbatch_pytorch_gives_torchrun_the_program_in_its_own_words(tmp_path, program, tail):
    script = render_export(plan_of("pytorch", "tcp"), "sbatch")
    proc = _run(tmp_path, script, program, FAKE_PMIX="")
    assert proc.returncode == 0, proc.stderr
    args = _args(tmp_path, "srun")
    assert args[args.index("--rdzv-endpoint=n1:29500") + 1:] == tail


@pytest.mark.parametrize("framework", ["mpi", "pytorch"])
def test_sbatch_keeps_what_the_environment_sets(tmp_path, framework):
    plan = plan_of(framework, "ib")
    name, planned = plan.launch_env[0]
    b = _fake_bin(tmp_path)
    for tool in ("srun", "mpirun"):
        (b / tool).write_text(f'#!/bin/bash\n[ "$1" = --version ] && exit 0\n'
                              f'[ "$1" = --mpi=list ] && exit 0\n'
                              f'echo "${{{name}-unset}}" > "$FAKE_OUT/env"\n')
    script = render_export(plan, "sbatch")
    proc = _run(tmp_path, script, ["./hello"], **{name: "mine"})
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "env").read_text() == "mine\n"
    assert f"from the environment, not the plan: {name}" in proc.stderr
    env = {k: v for k, v in os.environ.items() if k != name}
    proc = subprocess.run(["bash", str(tmp_path / "script.sh"), "./hello"], env={
        **env, "PATH": f"{b}:{os.environ['PATH']}", "FAKE_OUT": str(tmp_path),
        "SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[1-3]", "SLURM_JOB_NUM_NODES": "3"},
        capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "env").read_text() == planned + "\n"


def test_sbatch_pytorch_refuses_a_python_command_torchrun_cannot_take(tmp_path):
    script = render_export(plan_of("pytorch", "tcp"), "sbatch")
    proc = _run(tmp_path, script, ["python", "-c", "print(1)"], FAKE_PMIX="")
    assert proc.returncode == 2 and not (tmp_path / "srun.args").exists()
    assert "torchrun cannot run" in proc.stderr.strip().splitlines()[-1]
