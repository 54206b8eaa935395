-- Lesson sessions present at the platform, with their quota flattened.
with

source as (

    select * from {{ source('lms', 'lesson_sessions') }}

),

renamed as (

    select
        id as session_id,
        lesson_id,
        title as session_title,
        status as session_status,
        quotas_type as quota_type,
        quotas_min as quota_min,
        quotas_max as quota_max,
        start_date as starts_at,
        end_date as ends_at,
        creation_date as created_at,
        on_site,
        is_live,
        location_name,
        location_room,
        len(presenters) as presenter_count,
        creator_id

    from source
    where deleted_at is null

)

select * from renamed
