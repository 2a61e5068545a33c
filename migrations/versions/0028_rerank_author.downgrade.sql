-- Nothing to undo here: the previous revision's db/functions re-create
-- proper_nouns and the re-ranker's features at head.
select 1;
