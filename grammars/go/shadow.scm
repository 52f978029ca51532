; Shadow-engine queries for Go (see grammars/python/shadow.scm for the captures).
(interpreted_string_literal) @skip
(raw_string_literal) @skip
(rune_literal) @skip
(comment) @skip
