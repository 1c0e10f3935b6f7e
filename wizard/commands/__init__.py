"""The subcommands, one module per family of them; cli.py parses the command line and
loads the module of the command it runs, and no other."""
