; Shadow-engine queries for HTML (see grammars/python/shadow.scm for the captures).
(comment) @skip
(raw_text) @skip
