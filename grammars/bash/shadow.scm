; Shadow-engine queries for Bash (see grammars/python/shadow.scm for the captures).
(string) @skip
(raw_string) @skip
(heredoc_body) @skip
(comment) @skip
