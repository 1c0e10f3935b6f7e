"""The exit statuses of every command, the wizard's included."""

EXIT_OK = 0
EXIT_FAILED = 1  # a step or a check failed
EXIT_BAD_INPUT = 2  # one line on stderr, and nothing changed
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports Ctrl+C
