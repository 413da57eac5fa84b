"""Layer 6, the `dbsp` command: argument parsing (``main``), the subcommands (``commands``) and
their printing (``render``)."""
