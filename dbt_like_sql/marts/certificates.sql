-- Certificates: one row per certificate with its state on the build's reference instant `as_of`
-- (the project variable as_of, the build time unless pinned):
--   revoked   disabled
--   expired   not disabled, expires_at <= as_of
--   active    not disabled, no expiry or expires_at > as_of
-- expiring_within_30_days: active and expires_at <= as_of + 30 days.
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
