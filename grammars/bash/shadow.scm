; Shadow-engine queries for Bash (see grammars/python/shadow.scm for the captures).
(string) @skip
(raw_string) @skip
(heredoc_body) @skip
(comment) @skip

(function_definition) @construct
(if_statement) @construct
(for_statement) @construct
(while_statement) @construct
(case_statement) @construct
