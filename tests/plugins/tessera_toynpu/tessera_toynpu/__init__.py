"""A sample third-party backend package, as a hardware vendor would write one."""
