"""Peak memory of the TUI through the headline flow (fixture facts: GPU+IB, no sudo;
MPI+IB; the preset; Export of the launch script), headless at 80x24. Prints the peak RSS in
MiB, read from the kernel (ru_maxrss) after the flow."""
import asyncio
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))


async def flow(tmp: Path) -> None:
    from _tui_fixtures import FakeRunner, gpu_ib
    from hpcwizard.catalog import load_catalog
    from hpcwizard.screens.app import WizardApp

    app = WizardApp(facts=gpu_ib(sudo="none"), runner=FakeRunner(), catalog=load_catalog(),
                    state_dir=tmp / "state")

    async def until(cond):
        end = time.monotonic() + 20
        while not cond():
            if time.monotonic() > end:
                raise SystemExit(f"stuck on {type(app.screen).__name__}")
            await pilot.pause(0.02)

    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("enter")
        await until(lambda: type(app.screen).__name__ == "ChooseScreen")
        await pilot.press("tab", "right", "enter", "ctrl+n")
        await until(lambda: type(app.screen).__name__ == "RecommendScreen")
        await pilot.press("enter")
        await until(lambda: type(app.screen).__name__ == "DoneScreen")
        await pilot.press("enter")
        await until(lambda: any(tmp.glob("*launch*")))


with tempfile.TemporaryDirectory() as d:
    import os

    os.chdir(d)
    asyncio.run(flow(Path(d)))
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
