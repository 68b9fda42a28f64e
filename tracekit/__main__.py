import sys

try:
    from tracekit.cli import entry
except KeyboardInterrupt:  # Ctrl-C while the CLI loads
    sys.exit(130)

entry()
