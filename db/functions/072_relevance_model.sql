-- Relevance model: placeholder until bench/fit_relevance.py writes this file.

-- name: relevance_coefficients: the fitted logistic model's intercept and coefficients (relevance_features order).
create or replace function membank_private.relevance_coefficients(model text)
returns double precision[]
language sql
immutable
parallel safe
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select case model
        when 'hybrid' then array[0, 0, 0, 0, 0, 0, 0]
        when 'text' then array[0, 0, 0, 0]
    end::double precision [];
$$;

-- name: default_min_relevance: the min_relevance of the paths that put memories into a prompt unasked.
create or replace function membank.default_min_relevance()
returns double precision
language sql
immutable
parallel safe
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select 0.5::double precision;
$$;
