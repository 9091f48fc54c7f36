"""The fill pipeline, in order: holes (the cursor or selection -> the syntactic hole) -> prompt (prefix and
suffix budgeted and laid out) -> pipeline (one fill: cache, engine job, answer) -> worker (the engine thread
that runs the job) -> edits (post-processing and the LSP edit) -> syntax, syntax_window (the syntax gate);
cache holds the fills' LRU and what was shown (typed-ahead)."""
