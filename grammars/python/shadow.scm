; Shadow-engine queries for Python.
; @skip: where drafting syntax is pointless (the cursor is inside free text).
(string) @skip
(comment) @skip
