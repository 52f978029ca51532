; Shadow-engine queries for JavaScript (see grammars/python/shadow.scm for the captures).
(string) @skip
(template_string) @skip
(comment) @skip
