"""The Textual interface; started lazily by hpcwizard.cli."""
