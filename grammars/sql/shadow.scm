; Shadow-engine queries for SQL (see grammars/python/shadow.scm for the captures).
(comment) @skip
(literal) @skip
