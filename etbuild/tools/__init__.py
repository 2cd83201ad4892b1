"""Tools on built programs: `profile` (and `profile_report`), `generate` for language models, and
`instrument`, which observes a loaded method step by step (torch-free) for both."""
