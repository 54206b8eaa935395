-- Certificates per badge on the build's reference instant (see certificates.sql for the states):
-- certificates = active + expired + revoked; expiring_within_30_days is a part of active.
with

certificates as (

    select * from {{ ref('certificates') }}

),

final as (

    select
        badge_id,
        any_value(badge_name order by completed_at desc) as badge_name,
        count(*) as certificates,
        count(*) filter (where state = 'active') as active,
        count(*) filter (where expiring_within_30_days) as expiring_within_30_days,
        count(*) filter (where state = 'expired') as expired,
        count(*) filter (where state = 'revoked') as revoked,
        any_value(as_of) as as_of

    from certificates

    group by badge_id

)

select * from final
