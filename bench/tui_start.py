"""One TUI start: from this process's start to the System screen showing detected facts
(real detection, headless Pilot at 80x24), then exit. bench/run.py times the whole process
against `hpcwizard --version`."""
import asyncio
import time


async def main() -> None:
    from hpcwizard.screens.app import WizardApp

    app = WizardApp()
    async with app.run_test(size=(80, 24)) as pilot:
        deadline = time.monotonic() + 30
        while app.facts is None or type(app.screen).__name__ != "SystemScreen":
            if time.monotonic() > deadline:
                raise SystemExit("the System screen did not get its facts within 30 s")
            await pilot.pause(0.01)


asyncio.run(main())
