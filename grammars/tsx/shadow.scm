; Shadow-engine queries for TSX (see grammars/python/shadow.scm for the captures).
(string) @skip
(template_string) @skip
(comment) @skip
