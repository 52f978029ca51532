; Shadow-engine queries for TypeScript (see grammars/python/shadow.scm for the captures).
(string) @skip
(template_string) @skip
(comment) @skip
