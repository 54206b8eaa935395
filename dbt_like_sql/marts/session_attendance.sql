-- Session attendance and fill rate: one row per lesson session.
-- seats_taken = approved registrations (waiting list, pending validation and rejected take no seat).
-- fill_rate = seats_taken / quota max, for quotas with a max (type max or min-max); null otherwise.
-- attendance_rate = attended / (attended + absent): among registrations whose attendance was recorded.
with

sessions as (

    select * from {{ ref('stg_lesson_sessions') }}

),

registrations as (

    select * from {{ ref('stg_lesson_session_registrations') }}

),

registrations_per_session as (

    select
        session_id,
        count(*) as registrations,
        count(*) filter (where registration_status = 'approved') as approved,
        count(*) filter (where registration_status = 'waiting-list') as waiting_list,
        count(*) filter (where registration_status = 'pending-validation') as pending_validation,
        count(*) filter (where registration_status = 'rejected') as rejected,
        count(*) filter (where attendance = 'attended') as attended,
        count(*) filter (where attendance = 'absent') as absent

    from registrations

    group by session_id

),

final as (

    select
        sessions.session_id,
        sessions.session_title,
        sessions.lesson_id,
        sessions.session_status,
        sessions.starts_at,
        sessions.ends_at,
        sessions.quota_type,
        sessions.quota_min,
        sessions.quota_max,
        coalesce(registrations_per_session.registrations, 0) as registrations,
        coalesce(registrations_per_session.approved, 0) as seats_taken,
        coalesce(registrations_per_session.waiting_list, 0) as waiting_list,
        coalesce(registrations_per_session.pending_validation, 0) as pending_validation,
        coalesce(registrations_per_session.rejected, 0) as rejected,
        coalesce(registrations_per_session.attended, 0) as attended,
        coalesce(registrations_per_session.absent, 0) as absent,
        case
            when sessions.quota_type in ('max', 'min-max') and sessions.quota_max > 0
                then coalesce(registrations_per_session.approved, 0) / sessions.quota_max
        end as fill_rate,
        case
            when sessions.quota_type in ('min', 'min-max')
                then coalesce(registrations_per_session.approved, 0) < sessions.quota_min
        end as below_min_quota,
        {{ rate(
            'registrations_per_session.attended',
            'registrations_per_session.attended + registrations_per_session.absent',
        ) }} as attendance_rate

    from sessions

    left join registrations_per_session
        on sessions.session_id = registrations_per_session.session_id

)

select * from final
