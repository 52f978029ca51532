; Shadow-engine queries for JSON (see grammars/python/shadow.scm for the captures).
; Strings are not @skip: a JSON string is short and its end is drafted (key -> '": ').
(comment) @skip
