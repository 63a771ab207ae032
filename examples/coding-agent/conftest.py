"""pytest settings for examples/coding-agent: the sample repository's tests fail on
purpose (the demo's agent fixes them), so they are never collected from here."""

collect_ignore = ["sample-repo"]
