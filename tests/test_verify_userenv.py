"""verify and the job's environment (hpcwizard.verify.jobenv, userenv): verify's mpirun gets the
launch script's -x names and --prefix (recipes/runtime.sh's hw_rt_forward_args, asked once),
and where the environment that runs verify has a python3 (or an Open MPI) of its own, every
rank runs that python3 and must report its sys.prefix and OMP_NUM_THREADS; a rank with
another Python names its instance. With nothing outside /usr the check is absent."""
from __future__ import annotations

import json

from _core_fixtures import ROOT, facts
from _verify_fixtures import FakeSystem, logins_by_name
from hpcwizard.catalog import load_catalog
from hpcwizard.choices import make_choices
from hpcwizard.hosts import Hosts
from hpcwizard.plan import build_plan
from hpcwizard.verify import FAIL, PASS, SKIP, verify
from hpcwizard.verify import probes as P
from hpcwizard.verify.userenv import ID, MARK, REPORT_PY

PEERS = {"node1": "ok", "node2": "ok", "node3": "ok"}
VENV = "/opt/venv"
VENV_ENV = ("x PATH\nx VIRTUAL_ENV\nx OMP_NUM_THREADS\nprefix \n"
            f"python3 {VENV}/bin/python3\nsysprefix {VENV}\nomp 3\n")


def _is_env_run(p) -> bool:
    return isinstance(p, P.Mpirun) and p.program[:1] == ("python3",)


def ranks(*said) -> str:
    """The ranks' lines: (host, prefix, omp) each."""
    return "".join(MARK + json.dumps({"host": h, "prefix": pre, "omp": omp}) + "\n"
                   for h, pre, omp in said)


def run(job_env=None, rank_out="", rank_rc=0, peers=PEERS, framework="mpi"):
    answers = {}
    if job_env is not None:
        answers[P.JobEnvironment] = (0, job_env)
    answers[_is_env_run] = (rank_rc, rank_out)
    sys_ = FakeSystem(peers, answers)
    plan = build_plan(facts(user=ROOT), make_choices(framework=framework, network="tcp",
                                                     mode="manual"), load_catalog())
    report = verify(plan, facts(user=ROOT), Hosts(tuple(peers), "--hosts"), system=sys_)
    return report, {c.id: c for c in report.checks}, sys_


def test_nothing_outside_usr_no_check_and_mpirun_as_before():
    """The fake answers no JobEnvironment (as a machine without bash would): no -x, no
    --prefix are added and the check is no part of the report; with the system's python3
    neither."""
    report, c, sys_ = run()
    assert ID not in c and report.ok
    assert "-x" not in c["cluster/mpirun"].command
    report, c, sys_ = run("x PATH\nprefix \npython3 /usr/bin/python3\nsysprefix /usr\n")
    assert ID not in c and report.ok
    assert not [p for p in sys_.probes if _is_env_run(p)]
    assert len(sys_.asked(P.JobEnvironment)) == 1  # asked once per verification


def test_the_users_venv_on_every_rank_passes_with_the_launch_scripts_arguments():
    said = ranks(("node1", VENV, "3"), ("node2.cluster", VENV, "3"), ("node3", VENV, "3"))
    report, c, sys_ = run(VENV_ENV, said)
    assert report.ok, [(x.id, x.detail) for x in report.checks if x.status != PASS]
    assert c[ID].status == PASS
    assert c[ID].detail == f"3 ranks run the python3 of {VENV}; OMP_NUM_THREADS=3"
    [env_run] = [p for p in sys_.probes if _is_env_run(p)]
    assert env_run.program == ("python3", "-c", REPORT_PY) and env_run.np == 3
    for probe in (env_run, *[p for p in sys_.asked(P.Mpirun) if p.program == ("hostname",)]):
        args = list(probe.args)
        assert [args[i + 1] for i, a in enumerate(args) if a == "-x"][-3:] == [
            "PATH", "VIRTUAL_ENV", "OMP_NUM_THREADS"], args
        assert "--prefix" not in args


def test_an_open_mpi_elsewhere_gets_its_prefix_in_verifys_mpirun():
    job_env = "x PATH\nprefix /opt/hpcx/ompi\npython3 /usr/bin/python3\nsysprefix /usr\n"
    said = ranks(("node1", "/usr", None), ("node2", "/usr", None), ("node3", "/usr", None))
    report, c, sys_ = run(job_env, said)
    assert c[ID].status == PASS, c[ID].detail
    for probe in sys_.asked(P.Mpirun):
        i = probe.args.index("--prefix")
        assert probe.args[i + 1] == "/opt/hpcx/ompi"


def test_a_rank_with_another_python_names_its_instance_and_the_fix():
    said = ranks(("node1", VENV, "3"), ("node2", VENV, "3"), ("node3", "/usr", "3"))
    report, c, _ = run(VENV_ENV, said)
    assert not report.ok and c[ID].status == FAIL
    assert c[ID].detail == f"node3: python3 of /usr, not {VENV}"
    assert f"Create {VENV} on node3" in c[ID].explain
    assert not c[ID].diagnoses  # mpirun ran: nothing of its daemons to diagnose


def test_a_missing_setting_and_a_missing_rank_are_named():
    said = ranks(("node1", VENV, "3"), ("node2", VENV, None))
    _report, c, _ = run(VENV_ENV, said)
    assert c[ID].status == FAIL
    assert c[ID].detail == "node2: OMP_NUM_THREADS unset, not 3; node3: no rank answered"


def test_mpirun_failing_is_diagnosed():
    _report, c, _ = run(VENV_ENV, "bash: line 1: orted: command not found\n", rank_rc=1)
    assert c[ID].status == FAIL and c[ID].diagnoses


def test_skipped_when_mpirun_across_hosts_did_not_pass():
    _report, c, _ = run(VENV_ENV, peers={"node1": "ok", "node2": "down"})
    assert c[ID].status == SKIP


def test_not_part_of_a_pytorch_verification():
    _report, c, sys_ = run(VENV_ENV, framework="pytorch")
    assert ID not in c and not sys_.asked(P.JobEnvironment)


def test_the_environment_is_the_job_users_when_root_verifies_for_another(monkeypatch):
    """Root verifying a plan for bob: bob's ranks run bob's environment, not root's (whose
    PATH may name a python3 under /root that bob cannot even read), so the question is
    asked as bob, as verify's mpirun runs."""
    import pwd

    monkeypatch.setattr(pwd, "getpwnam", lambda name: pwd.struct_passwd(
        (name, "x", 4242, 4242, "", f"/home/{name}", "/bin/bash")))
    sys_ = FakeSystem(PEERS, {P.JobEnvironment: (0, VENV_ENV),
                              _is_env_run: (0, ranks(*((h, VENV, "3") for h in PEERS)))})
    plan = build_plan(facts(user=ROOT), make_choices(framework="mpi", network="tcp",
                                                     mode="manual", user="bob"), load_catalog())
    verify(plan, facts(user=ROOT), Hosts(tuple(PEERS), "--hosts"), system=sys_)
    asked = sys_.asked(P.JobEnvironment)
    assert len(asked) == 1 and asked[0].argv()[:4] == ("runuser", "-u", "bob", "--")


def test_ranks_whose_lines_ran_together_each_count():
    """mpirun forwards a rank's text and its newline in two pieces under load; another
    rank's text can come between (seen at 16 instances in CI: two hosts then had 'no rank
    answered'). Each rank's answer still counts."""
    from hpcwizard.verify.userenv import rank_envs

    one, two = ranks(("node1", VENV, "3")).rstrip("\n"), ranks(("node8", VENV, "3"))
    together = one + two.replace("\n", "\r\n") + "\r\n" + ranks(("node2", VENV, "3"))
    assert [r.host for r in rank_envs(together)] == ["node1", "node8", "node2"]
    report, c, _sys = run(VENV_ENV, together.replace("node8", "node3"))
    assert c[ID].status == PASS, c[ID].detail


def test_hosts_given_as_addresses_are_judged_by_the_names_ranks_give():
    """SkyPilot and dstack name the instances by address; each rank says its host name."""
    ips = {"10.78.0.1": "ok", "10.78.0.2": "ok", "10.78.0.3": "ok"}
    hostnames = "node1\nnode2\nnode3\n"
    hostname_run = lambda p: isinstance(p, P.Mpirun) and p.program == ("hostname",)  # noqa: E731

    def with_ips(rank_out):
        sys_ = FakeSystem(ips, {P.JobEnvironment: (0, VENV_ENV), _is_env_run: (0, rank_out),
                                hostname_run: (0, hostnames), **logins_by_name(ips)})
        plan = build_plan(facts(user=ROOT), make_choices(framework="mpi", network="tcp",
                                                         mode="manual"), load_catalog())
        report = verify(plan, facts(user=ROOT), Hosts(tuple(ips), "SKYPILOT_NODE_IPS"),
                        system=sys_)
        return {c.id: c for c in report.checks}

    c = with_ips(ranks(("node1", VENV, "3"), ("node2", VENV, "3"), ("node3", VENV, "3")))
    assert c[ID].status == PASS, c[ID].detail
    c = with_ips(ranks(("node1", VENV, "3"), ("node2", "/usr", "3")))
    assert c[ID].status == FAIL
    # each address is named with the name its key login gave: which instance is which
    assert c[ID].detail == ("10.78.0.2 (node2): python3 of /usr, not /opt/venv; "
                            "10.78.0.3 (node3): no rank answered")


def test_a_rank_whose_host_name_is_an_address_is_judged_once():
    """A node whose host name is its IP answers with the address itself."""
    from hpcwizard.verify.jobenv import JobEnv
    from hpcwizard.verify.userenv import RankEnv, problems

    env = JobEnv(sys_prefix=VENV, omp="3")
    said = [RankEnv("10.0.0.1", VENV, "3"), RankEnv("10.0.0.2", "/usr", "3")]
    assert problems(env, ["10.0.0.1", "10.0.0.2"], said) == {
        "10.0.0.2": f"python3 of /usr, not {VENV}"}
    assert problems(env, ["10.0.0.1", "10.0.0.2"], said[:1]) == {
        "10.0.0.2": "no rank answered"}
