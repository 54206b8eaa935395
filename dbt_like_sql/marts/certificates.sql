-- Certificates: one row per certificate with its state on the build's reference instant `as_of`
-- (the project variable as_of, the build time unless pinned):
--   revoked   disabled
--   expired   not disabled, expires_at <= as_of
--   active    not disabled, no expiry or expires_at > as_of
-- expiring_within_30_days: active and expires_at <= as_of + 30 days.
-- With as_of alone the rows change when an active certificate enters its last 30 days or expires: until the first
-- such instant (valid_until, evaluated over the rows built) a later build keeps the table and the as_of it was
-- built for, its other inputs being the same (LessonSync's runner; dbt keeps meta as it is).
{{ config(meta={'lessonsync': {'valid_until':
    "min(case when state = 'active' then"
    ~ " case when expiring_within_30_days then expires_at else expires_at - interval 30 day end end)"
}}) }}

with

certificates as (

    select * from {{ ref('stg_certificates') }}

),

final as (

    select
        certificate_id,
        user_id,
        badge_id,
        badge_name,
        completed_at,
        expires_at,
        case
            when is_disabled then 'revoked'
            when expires_at <= {{ as_of() }} then 'expired'
            else 'active'
        end as state,
        coalesce(
            not is_disabled
            and expires_at > {{ as_of() }}
            and expires_at <= {{ as_of() }} + interval 30 day,
            false
        ) as expiring_within_30_days,
        {{ as_of() }} as as_of

    from certificates

)

select * from final
